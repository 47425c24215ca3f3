# `cmake --build build --target bundle` writes build/bundle/: bin/wick, lib/libwick.so and every
# non-system shared library they load (OpenBLAS, MPI, HDF5, ...), with RUNPATH $ORIGIN/../lib,
# so the directory can be copied to a GPU node without package access. The CUDA libraries
# (cuBLAS, cuDNN, NCCL, the driver) are deliberately left out: they come from that node's CUDA
# installation (set LD_LIBRARY_PATH to its lib64 if it is not in the loader's path).
set(WICK_BUNDLE_DIR ${CMAKE_BINARY_DIR}/bundle CACHE PATH "Where the bundle target writes")
add_custom_target(bundle
  COMMAND ${CMAKE_COMMAND}
          -DBUNDLE_DIR=${WICK_BUNDLE_DIR}
          -DWICK_EXE=$<TARGET_FILE:wick_cli>
          -DWICK_LIB=$<TARGET_FILE:wick>
          -DWICK_LIB_SONAME=$<TARGET_SONAME_FILE_NAME:wick>
          -P ${CMAKE_SOURCE_DIR}/cmake/make_bundle.cmake
  DEPENDS wick_cli wick
  COMMENT "Writing the relocatable bundle to ${WICK_BUNDLE_DIR}")
