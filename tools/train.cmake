# tools/train.cmake -- memest-train, the trainer of the learned backend (docs/learned.md).
# Included from tools/CMakeLists.txt. Uses the GPUMemNet importer (datasets/gpumemnet/) and the
# measured-row reader and metrics of memest_eval (tools/eval.cmake).
add_executable(memest-train ${CMAKE_CURRENT_LIST_DIR}/train_main.cc
                            ${CMAKE_CURRENT_LIST_DIR}/train_device.cc)
target_include_directories(memest-train PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(memest-train PRIVATE MEMEST_VERSION="${PROJECT_VERSION}")
target_link_libraries(memest-train PRIVATE memest memest_eval memest_gpumemnet memest_zoo
                                           CLI11::CLI11 fmt::fmt nlohmann_json::nlohmann_json
                                           Eigen3::Eigen)
