// Fixture for tests/simgpu/module_image_test.cpp: a relocatable cubin where a non-inlined device
// function gets its own .text and .nv.info section but must not be reported as a kernel.
extern "C" __device__ __noinline__ float dev_fn(float x) { return x * 3.0f; }

extern "C" __global__ void k(float* p) { p[0] = dev_fn(p[1]); }
