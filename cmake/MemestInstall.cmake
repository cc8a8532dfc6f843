# The installable memest (docs/embedding.md): one shared library, libmemest.so, made of every
# layer's objects, with the public headers (include/memest/, and the generated version.h), a CMake
# package (find_package(memest CONFIG) -> memest::memest) and a pkg-config file (memest.pc).
# ONNX, protobuf and fmt are linked privately, so a consumer needs none of them (nor CLI11,
# nlohmann-json, Eigen or LibTorch, which only memest's own programs use).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MEMEST_SHARED_OBJECTS "")
foreach(layer IN LISTS MEMEST_LAYERS)
  # The measurement backend needs LibTorch; it stays in memest_measurement (docs/measurement.md).
  if(NOT layer STREQUAL "measurement")
    list(APPEND MEMEST_SHARED_OBJECTS $<TARGET_OBJECTS:memest_${layer}>)
  endif()
endforeach()
add_library(memest_shared SHARED ${MEMEST_SHARED_OBJECTS})
set_target_properties(memest_shared PROPERTIES OUTPUT_NAME memest EXPORT_NAME memest
                                               VERSION ${PROJECT_VERSION}
                                               SOVERSION ${PROJECT_VERSION_MAJOR})
target_link_libraries(memest_shared PRIVATE onnx onnx_proto protobuf::libprotobuf fmt::fmt)
# Every symbol resolved at link time (a layer that leaked into the library would show here), except
# in sanitizer builds, whose runtime the executable brings.
if(NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  target_link_options(memest_shared PRIVATE -Wl,--no-undefined)
endif()
target_include_directories(memest_shared PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

install(TARGETS memest_shared EXPORT memestTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/memest ${PROJECT_BINARY_DIR}/include/memest
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT memestTargets NAMESPACE memest::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memest)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/memestConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/memestConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memest)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/memestConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/memestConfig.cmake
              ${PROJECT_BINARY_DIR}/memestConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memest)
# The .pc file finds its prefix from where it lies (pkg-config's ${pcfiledir}), so that
# `cmake --install build --prefix DIR` gives a correct one in any DIR.
file(RELATIVE_PATH MEMEST_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/memest.pc.in ${PROJECT_BINARY_DIR}/memest.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/memest.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# The CLI too, when it is built.
if(TARGET memest-cli)
  install(TARGETS memest-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
