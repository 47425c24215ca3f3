# Installs libwick, its headers and a CMake package so C++ users can write
#   find_package(wick REQUIRED)  target_link_libraries(app PRIVATE wick::wick)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS wick EXPORT wickTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS wick_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(layer runtime engine comm models)
  if(EXISTS ${CMAKE_SOURCE_DIR}/${layer})
    install(DIRECTORY ${layer} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/wick
            FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
  endif()
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/generated/wick/build_info.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/wick)

install(EXPORT wickTargets NAMESPACE wick:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/wick)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/wickConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/wickConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/wick)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/wickConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/wickConfig.cmake ${CMAKE_BINARY_DIR}/wickConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/wick)
