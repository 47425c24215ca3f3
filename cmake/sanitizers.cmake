# The sanitizers' run-time options for every test of a WICK_SANITIZE build (docs/testing.md "Sanitizers").
#   include(${PROJECT_SOURCE_DIR}/cmake/sanitizers.cmake)
#   wick_sanitizer_environment()   # last line of a CMakeLists.txt that adds tests: appends to each one's ENVIRONMENT
# ASan stops at the first error and checks the order of static initializers; LeakSanitizer runs at exit with the
# suppressions of tests/sanitizers/lsan.supp (leaks inside Open MPI, hwloc and the other system libraries, never
# wick's); UBSan prints the stack of the first undefined behaviour and stops (the code is also built with
# -fno-sanitize-recover=all). Processes that tests start (wick, mpirun's ranks) inherit the environment.
set(WICK_SANITIZER_ENVIRONMENT
    "ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:check_initialization_order=1:detect_odr_violation=2"
    "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/sanitizers/lsan.supp:print_suppressions=0"
    "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")

function(wick_sanitizer_environment)
  if(NOT WICK_SANITIZE)
    return()
  endif()
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test IN LISTS tests)
    set(environment ${WICK_SANITIZER_ENVIRONMENT})
    get_property(labels TEST ${test} PROPERTY LABELS)
    if("mpi" IN_LIST labels)
      # Open MPI's leaks are allocated in plugins built without frame pointers and unloaded before the leak check:
      # only the slow unwinder's full stacks reach libmpi/libopen-rte, which the suppressions name.
      # intercept_tls_get_addr=0: LeakSanitizer's tracer crashed at every exit of the 3-rank run in
      # tests/train/train_reg_test.sh ("Tracer caught signal 11" while it scanned a bogus dynamic-TLS range,
      # "DTLS 16 at 0x000000005b02-0x000400006c04", gcc 12's libasan with glibc 2.36). Without the interception
      # dynamic TLS blocks are not scanned as roots: a leak report can only get more likely, never hidden.
      list(TRANSFORM environment REPLACE "^ASAN_OPTIONS=(.*)"
           "ASAN_OPTIONS=\\1:fast_unwind_on_malloc=0:intercept_tls_get_addr=0")
    endif()
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT ${environment})
    # ASan and UBSan slow the code down several times: three times each test's own time limit.
    get_property(timeout TEST ${test} PROPERTY TIMEOUT)
    if(timeout)
      math(EXPR timeout "${timeout} * 3")
      set_property(TEST ${test} PROPERTY TIMEOUT ${timeout})
    endif()
  endforeach()
endfunction()

# The ThreadSanitizer build (WICK_TSAN): the environment of its tests (label tsan, tests/CMakeLists.txt), each run
# through tests/sanitizers/tsan_run.sh, which adds log_path and fails on any report. Every report is collected
# (halt_on_error=0), with the second stack of a lock-order inversion; tsan.supp names only third-party libraries.
# OpenMP and OpenBLAS run one thread: libgomp is not built with ThreadSanitizer, which cannot see its barriers and
# would report every parallel loop (docs/testing.md "ThreadSanitizer"). Open MPI refuses root unless told.
set(WICK_TSAN_ENVIRONMENT
    "TSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/sanitizers/tsan.supp:halt_on_error=0:second_deadlock_stack=1:history_size=4"
    "OMP_NUM_THREADS=1" "OPENBLAS_NUM_THREADS=1" "OMP_WAIT_POLICY=passive"
    "OMPI_ALLOW_RUN_AS_ROOT=1" "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
