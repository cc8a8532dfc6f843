# tools/measure.cmake -- memest-measure, the measurement harness CLI (docs/measurement.md).
# Included from tools/CMakeLists.txt; built only when LibTorch was found.
if(MEMEST_HAVE_TORCH)
  add_executable(memest-measure ${CMAKE_CURRENT_LIST_DIR}/measure_main.cc
                                ${CMAKE_CURRENT_LIST_DIR}/options_flags.cc)
  target_include_directories(memest-measure PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(memest-measure PRIVATE MEMEST_VERSION="${PROJECT_VERSION}")
  target_link_libraries(memest-measure PRIVATE memest memest_measurement CLI11::CLI11 nlohmann_json::nlohmann_json
                                               fmt::fmt)
endif()
