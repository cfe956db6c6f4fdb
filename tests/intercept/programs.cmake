# CUDA driver-API programs the shim's integration tests run under LD_PRELOAD=libgpuqos.so on simgpu.
# linked_client links libcuda like any CUDA program (the toolkit's stub at link time, simgpu's
# libcuda.so.1 at run time); dlopen_client does not link it and finds it with dlopen + dlsym;
# gate_client (linked) is what the gate's tests run under a fake gpuqosd. dlopen_client `handles`
# also opens two libraries: test_wrapper defines cuLaunchKernel of its own, test_linked links libcuda.
# future_driver, preloaded after the shim, plays a driver newer than the shim (linked_client `future`).
foreach(program linked_client dlopen_client gate_client)
  add_executable(intercept_${program} ${CMAKE_CURRENT_LIST_DIR}/programs/${program}.cpp)
  set_target_properties(intercept_${program} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/programs)
  target_include_directories(intercept_${program} PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/tests/common)
  gpuqos_warnings(intercept_${program})
endforeach()
target_link_libraries(intercept_linked_client PRIVATE CUDA::cuda_driver ${CMAKE_DL_LIBS})
target_link_libraries(intercept_dlopen_client PRIVATE ${CMAKE_DL_LIBS})
target_link_libraries(intercept_gate_client PRIVATE CUDA::cuda_driver Threads::Threads ${CMAKE_DL_LIBS})
target_include_directories(intercept_gate_client PRIVATE ${PROJECT_SOURCE_DIR}/intercept/include)  # gpuqos/query.h
foreach(library test_wrapper test_linked future_driver)
  add_library(intercept_${library} SHARED ${CMAKE_CURRENT_LIST_DIR}/programs/${library}.cpp)
  set_target_properties(intercept_${library} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/programs)
  target_include_directories(intercept_${library} PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  gpuqos_warnings(intercept_${library})
endforeach()
target_link_libraries(intercept_test_linked PRIVATE CUDA::cuda_driver)
add_dependencies(intercept_dlopen_client intercept_test_wrapper intercept_test_linked)
target_link_libraries(intercept_future_driver PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(intercept_linked_client intercept_future_driver)
# gpuqos/query.h as users build it, C99 and C++17, strict warnings as errors (a user test: `gcc
# -pedantic` warned of dlsym's cast, which fails a -Werror build); run without the shim, no-ops.
# `first_c` includes it before any libc header, in a POSIX (not GNU) program.
foreach(file query_marks.c query_marks.cpp query_marks_first.c)
  string(REPLACE "." "_" name ${file})
  string(REPLACE "query_marks_" "" variant ${name})
  add_executable(intercept_query_marks_${variant} ${CMAKE_CURRENT_LIST_DIR}/programs/${file})
  set_target_properties(intercept_query_marks_${variant} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/tests/programs C_STANDARD 99 C_EXTENSIONS OFF CXX_STANDARD 17
                        CXX_EXTENSIONS OFF)
  target_include_directories(intercept_query_marks_${variant} PRIVATE ${PROJECT_SOURCE_DIR}/intercept/include)
  target_compile_options(intercept_query_marks_${variant} PRIVATE -Wall -Wextra -Wpedantic -Werror
                         $<$<COMPILE_LANGUAGE:CXX>:-Wold-style-cast>)
  target_link_libraries(intercept_query_marks_${variant} PRIVATE ${CMAKE_DL_LIBS})
  add_test(NAME intercept.QueryMarksBuildCleanAndAreNoOpsWithoutTheShim_${variant}
           COMMAND intercept_query_marks_${variant})
  set_tests_properties(intercept.QueryMarksBuildCleanAndAreNoOpsWithoutTheShim_${variant} PROPERTIES
                       LABELS unit PASS_REGULAR_EXPRESSION "marks ok")
endforeach()
