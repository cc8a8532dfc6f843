# tools/eval.cmake -- memest-eval, the accuracy tables (docs/accuracy.md), and memest_eval, its
# library (rows reader, metrics, held-out rules, evaluator, report, plots) that the unit tests link too.
# Included from tools/CMakeLists.txt.
add_library(memest_eval STATIC
  ${CMAKE_CURRENT_LIST_DIR}/eval/metrics.cc
  ${CMAKE_CURRENT_LIST_DIR}/eval/evaluate.cc
  ${CMAKE_CURRENT_LIST_DIR}/eval/heldout.cc
  ${CMAKE_CURRENT_LIST_DIR}/eval/report.cc
  ${CMAKE_CURRENT_LIST_DIR}/eval/plots.cc)
target_include_directories(memest_eval PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(memest_eval PUBLIC memest memest_gpumemnet memest_output nlohmann_json::nlohmann_json
                                  PRIVATE fmt::fmt)

add_executable(memest-eval ${CMAKE_CURRENT_LIST_DIR}/eval/eval_main.cc)
target_compile_definitions(memest-eval PRIVATE MEMEST_VERSION="${PROJECT_VERSION}")
target_link_libraries(memest-eval PRIVATE memest_eval CLI11::CLI11 fmt::fmt)
