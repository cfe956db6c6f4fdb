// Fixture kernels for tests/simgpu/module_image_test.cpp: different parameter lists and linkage.

struct Triple {
  double a;
  double b;
  int c;
};  // 24 bytes, 8-byte aligned

extern "C" __global__ void scale(float* out, int n, double factor) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(out[i] * factor);
}

__device__ __noinline__ float helper(float x) { return x * 2.0f; }

__global__ void with_struct(char tag, Triple t, float* out) {
  out[threadIdx.x] = helper(static_cast<float>(t.a + t.b + t.c + tag));
}

extern "C" __global__ void no_params() {}
