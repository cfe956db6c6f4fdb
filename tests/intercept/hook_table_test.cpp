// The hook table (intercept/hooks.def) and the cuGetProcAddress version map generated beside it.
#include "gpuqos/intercept/hooks.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace gpuqos::intercept {
namespace {

TEST(HookTable, NamesAndCategoriesComeFromHooksDef) {
  EXPECT_EQ(hook_name(HookId::hook_cuMemcpyHtoD_v2_ptds), "cuMemcpyHtoD_v2_ptds");
  EXPECT_EQ(hook_category(HookId::hook_cuLaunchKernel_ptsz), Category::launch);
  EXPECT_EQ(hook_category(HookId::hook_cuGraphLaunch), Category::graph_launch);
  EXPECT_EQ(hook_category(HookId::hook_cuMemsetD2D32Async_ptsz), Category::memset);
  EXPECT_EQ(hook_category(HookId::hook_cuStreamQuery_ptsz), Category::sync);
  EXPECT_EQ(hook_category(HookId::hook_cuLibraryGetKernel), Category::naming);
  EXPECT_EQ(hook_category(HookId::hook_cuMemAllocAsync_ptsz), Category::alloc);
  EXPECT_EQ(category_name(Category::graph_launch), "graph_launch");
}

TEST(HookTable, FindsEveryHookByItsNameAndNothingElse) {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < kHookCount; ++i) {
    const auto id = static_cast<HookId>(i);
    EXPECT_TRUE(names.insert(hook_name(id)).second) << "listed twice: " << hook_name(id);
    EXPECT_EQ(find_hook(hook_name(id)), id) << hook_name(id);
  }
  EXPECT_EQ(find_hook("cuInit"), std::nullopt);
  EXPECT_EQ(find_hook("cuLaunchHostFunc"), std::nullopt);
  EXPECT_EQ(find_hook(""), std::nullopt);
  EXPECT_EQ(find_hook("cuLaunchKernel_"), std::nullopt);
}

TEST(ProcAddressSymbols, AnswerTheNewestAbiNoNewerThanTheVersionAsked) {
  EXPECT_EQ(proc_address_symbols("cuMemcpyHtoD", 12000).legacy, "cuMemcpyHtoD_v2");
  EXPECT_EQ(proc_address_symbols("cuMemcpyHtoD", 12000).per_thread, "cuMemcpyHtoD_v2_ptds");
  EXPECT_EQ(proc_address_symbols("cuMemcpyHtoD", 3000).legacy, "cuMemcpyHtoD");  // 32-bit legacy ABI
  EXPECT_EQ(proc_address_symbols("cuMemcpyHtoD", 3000).per_thread, "");
  EXPECT_EQ(proc_address_symbols("cuLaunchKernel", 12000).per_thread, "cuLaunchKernel_ptsz");
  EXPECT_EQ(proc_address_symbols("cuLaunchKernel", 6050).per_thread, "");  // _ptsz arrived in CUDA 7.0
  EXPECT_EQ(proc_address_symbols("cuMemcpyBatchAsync", 12080).legacy, "cuMemcpyBatchAsync");
  EXPECT_EQ(proc_address_symbols("cuMemcpyBatchAsync", 13000).legacy, "cuMemcpyBatchAsync_v2");
  EXPECT_EQ(proc_address_symbols("cuMemcpyBatchAsync", 13000).per_thread, "cuMemcpyBatchAsync_v2_ptsz");
  EXPECT_EQ(proc_address_symbols("cuCtxSynchronize", 13000).legacy, "cuCtxSynchronize_v2");
  EXPECT_EQ(proc_address_symbols("cuGetProcAddress", 12000).legacy, "cuGetProcAddress_v2");
  EXPECT_EQ(proc_address_symbols("cuLaunchKernel", 3000).legacy, "");  // older than the API
  EXPECT_EQ(proc_address_symbols("cuInit", 12000).legacy, "");         // not hooked: not in the table
}

// A driver answer we do not recognise is replaced by the hook of the ABI the version and flags
// choose, but only for versions whose ABIs this build knows: a newer one may have changed it.
TEST(ProcAddressSymbols, AnUnrecognisedAnswerIsHookedOnlyForVersionsWeKnow) {
  const int newest = newest_known_cuda_version();
  EXPECT_EQ(hook_for_unrecognised_answer("cuLaunchKernel", 12000, false), HookId::hook_cuLaunchKernel);
  EXPECT_EQ(hook_for_unrecognised_answer("cuLaunchKernel", 12000, true), HookId::hook_cuLaunchKernel_ptsz);
  EXPECT_EQ(hook_for_unrecognised_answer("cuMemcpyHtoD", newest, true), HookId::hook_cuMemcpyHtoD_v2_ptds);
  EXPECT_EQ(hook_for_unrecognised_answer("cuMemcpyHtoD", 3000, true), HookId::hook_cuMemcpyHtoD);  // no _ptds yet
  EXPECT_EQ(hook_for_unrecognised_answer("cuLaunchKernel", newest + 10, false), std::nullopt);
  EXPECT_EQ(hook_for_unrecognised_answer("cuMemcpyHtoD", newest + 10, true), std::nullopt);
  EXPECT_EQ(hook_for_unrecognised_answer("cuInit", 12000, false), std::nullopt);
  EXPECT_EQ(hook_for_unrecognised_answer("cuLaunchKernel", 3000, false), std::nullopt);
}

// From CUDA 12, cuGetProcAddress("cuGraphInstantiate") answers cuGraphInstantiateWithFlags (3
// parameters), which cudaTypedefs.h's version map does not say: were the CUDA 10/11 ABI (5
// parameters) hooked, its hook would be handed to a 3-argument caller. It is not hooked, so the
// driver's answer is kept; the forms whose ABI the map knows are hooked.
TEST(ProcAddressSymbols, ARenamedApiIsNotAnsweredWithTheOldAbisHook) {
  EXPECT_EQ(hook_for_unrecognised_answer("cuGraphInstantiate", 12000, false), std::nullopt);
  EXPECT_EQ(hook_for_unrecognised_answer("cuGraphInstantiateWithFlags", 12000, false),
            HookId::hook_cuGraphInstantiateWithFlags);
  EXPECT_EQ(hook_for_unrecognised_answer("cuGraphInstantiateWithParams", 12000, true),
            HookId::hook_cuGraphInstantiateWithParams_ptsz);
}

}  // namespace
}  // namespace gpuqos::intercept
