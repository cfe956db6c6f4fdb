# What the end-to-end tests run besides the real tools: pipeline_client, a CUDA driver-API program
# (linked like any CUDA program: the toolkit's stub at link time, simgpu's libcuda.so.1 at run time)
# that checks its own results, and hold_at_release, a preload that keeps a finished program alive
# (in cuDevicePrimaryCtxRelease) until the test lets it go, so gpuqosd's final accounting can be
# read while the program is still registered.
add_executable(e2e_pipeline_client ${CMAKE_CURRENT_LIST_DIR}/programs/pipeline_client.cpp)
set_target_properties(e2e_pipeline_client PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/programs)
target_include_directories(e2e_pipeline_client PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/tests/common)
target_link_libraries(e2e_pipeline_client PRIVATE CUDA::cuda_driver)
gpuqos_warnings(e2e_pipeline_client)

add_library(e2e_hold_at_release MODULE ${CMAKE_CURRENT_LIST_DIR}/programs/hold_at_release.cpp)
set_target_properties(e2e_hold_at_release PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/programs)
target_include_directories(e2e_hold_at_release PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(e2e_hold_at_release PRIVATE ${CMAKE_DL_LIBS})
gpuqos_warnings(e2e_hold_at_release)

# per_thread_streams: two threads on their per-thread default streams (every call a _ptsz/_ptds form).
add_executable(e2e_per_thread_streams ${CMAKE_CURRENT_LIST_DIR}/programs/per_thread_streams.cpp)
set_target_properties(e2e_per_thread_streams PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/programs)
target_include_directories(e2e_per_thread_streams PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/tests/common)
target_link_libraries(e2e_per_thread_streams PRIVATE CUDA::cuda_driver Threads::Threads)
gpuqos_warnings(e2e_per_thread_streams)
