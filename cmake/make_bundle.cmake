# Script mode helper for the `bundle` target (see bundle.cmake).
file(REMOVE_RECURSE ${BUNDLE_DIR})
file(MAKE_DIRECTORY ${BUNDLE_DIR}/bin ${BUNDLE_DIR}/lib)
file(COPY ${WICK_EXE} DESTINATION ${BUNDLE_DIR}/bin)
file(COPY_FILE ${WICK_LIB} ${BUNDLE_DIR}/lib/${WICK_LIB_SONAME})

file(GET_RUNTIME_DEPENDENCIES
  EXECUTABLES ${WICK_EXE}
  LIBRARIES ${WICK_LIB}
  RESOLVED_DEPENDENCIES_VAR resolved
  UNRESOLVED_DEPENDENCIES_VAR unresolved
  PRE_EXCLUDE_REGEXES
    # the C/C++ runtime and the loader: every Linux host has them
    "^ld-linux" "^libc\\.so" "^libm\\.so" "^libdl\\.so" "^librt\\.so" "^libpthread\\.so"
    "^libstdc\\+\\+\\.so" "^libgcc_s\\.so" "^linux-vdso"
    # CUDA: taken from the GPU node's own installation
    "^libcuda\\.so" "^libcudart" "^libcublas" "^libcublasLt" "^libcudnn" "^libnccl" "^libnvrtc"
    "^libnvJitLink" "^libcufft" "^libcurand" "^libcusparse" "^libcusolver"
    "^libwick\\.so")

foreach(library ${resolved})
  get_filename_component(name ${library} NAME)
  get_filename_component(real ${library} REALPATH)
  file(COPY_FILE ${real} ${BUNDLE_DIR}/lib/${name})
endforeach()
foreach(missing ${unresolved})
  message(WARNING "bundle: could not resolve ${missing}")
endforeach()

# Point every copied object at its neighbours.
find_program(PATCHELF patchelf)
if(PATCHELF)
  execute_process(COMMAND ${PATCHELF} --set-rpath "$ORIGIN/../lib" ${BUNDLE_DIR}/bin/wick)
  file(GLOB bundled ${BUNDLE_DIR}/lib/*.so*)
  foreach(library ${bundled})
    execute_process(COMMAND ${PATCHELF} --set-rpath "$ORIGIN" ${library})
  endforeach()
endif()
list(LENGTH resolved n_libraries)
message(STATUS "bundle: ${BUNDLE_DIR} (bin/wick and ${n_libraries} libraries)")
