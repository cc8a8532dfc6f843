# memest_layer(NAME SOURCES src... [USES layer...])
#
# memest's layers (README.md, Layout; scripts/check_layers.py lists the same order), lowest
# first: base -> core -> ops -> memory -> the backends -> api. Each is one static library, memest_<NAME>,
# built from the folder of the same name. The build enforces the order: a layer compiles with one
# include directory, <build>/layers/<NAME>/, that holds links to its own folder and to the
# folders of the layers it USES, and nothing else (the repository root is never on its include
# path). An #include of a layer above, or beside, is "file not found" at compile time.
# tests/CMakeLists.txt proves it (LayeringTest.BuildRejectsAnUpwardInclude).
#
# Every layer may include the public headers (include/memest/), links the layers it USES, and
# carries the ONNX/protobuf usage requirements. The layers' list, in order, is MEMEST_LAYERS.

# The version header (include/memest/version.h in the build tree and in an install).
configure_file(${PROJECT_SOURCE_DIR}/cmake/version.h.in ${PROJECT_BINARY_DIR}/include/memest/version.h
               @ONLY)

add_library(memest_deps INTERFACE)
target_include_directories(memest_deps INTERFACE ${PROJECT_SOURCE_DIR}/include
                                                 ${PROJECT_BINARY_DIR}/include)
target_link_libraries(memest_deps INTERFACE onnx onnx_proto protobuf::libprotobuf)
target_compile_definitions(memest_deps INTERFACE ONNX_ML=1 ONNX_NAMESPACE=onnx)

set(MEMEST_LAYERS "" CACHE INTERNAL "memest's layer libraries, lowest first")

# The include directory of layer `name`: links to its own folder and those of `uses`.
function(memest_layer_view name uses out)
  set(view ${PROJECT_BINARY_DIR}/layers/${name})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view})
  foreach(dir IN LISTS uses ITEMS ${name})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${dir} ${view}/${dir} SYMBOLIC)
  endforeach()
  set(${out} ${view} PARENT_SCOPE)
endfunction()

function(memest_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 LAYER "" "" "SOURCES;USES")
  memest_layer_view(${name} "${LAYER_USES}" view)
  add_library(memest_${name} STATIC ${LAYER_SOURCES})
  # Position-independent: the layers' objects also make the installable libmemest.so
  # (cmake/MemestInstall.cmake).
  set_target_properties(memest_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(memest_${name} PRIVATE ${view})
  target_link_libraries(memest_${name} PUBLIC memest_deps
                        PRIVATE nlohmann_json::nlohmann_json fmt::fmt Eigen3::Eigen)
  foreach(dep IN LISTS LAYER_USES)
    target_link_libraries(memest_${name} PUBLIC memest_${dep})
  endforeach()
  set(MEMEST_LAYERS ${MEMEST_LAYERS} ${name} CACHE INTERNAL "")
endfunction()
