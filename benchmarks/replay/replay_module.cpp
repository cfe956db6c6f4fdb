// Generates the replay PTX module and the matching simgpu kernel catalog.
#include "gpuqos/replay/replay_module.h"

#include <nlohmann/json.hpp>

namespace gpuqos::replay {

namespace {

std::string spin_entry(const std::string& entry) {
  return ".visible .entry " + entry + "(\n"
         "\t.param .u64 " + entry + "_duration_ns\n"
         ")\n"
         "{\n"
         "\t.reg .pred \t%p<2>;\n"
         "\t.reg .b64 \t%rd<6>;\n"
         "\n"
         "\tld.param.u64 \t%rd1, [" + entry + "_duration_ns];\n"
         "\tmov.u64 \t%rd2, %globaltimer;\n"
         "\tadd.s64 \t%rd3, %rd2, %rd1;\n"
         "$L__" + entry + "_spin:\n"
         "\tmov.u64 \t%rd4, %globaltimer;\n"
         "\tsetp.lt.u64 \t%p1, %rd4, %rd3;\n"
         "\t@%p1 bra \t$L__" + entry + "_spin;\n"
         "\tret;\n"
         "}\n\n";
}

}  // namespace

std::string generate_ptx(const Workload& workload) {
  std::string ptx =
      "//\n// gpuqos replay module: one entry per kernel of " + workload.source +
      "\n// Each entry spins on %globaltimer for its first argument, in ns.\n//\n\n"
      ".version 7.0\n.target sm_70\n.address_size 64\n\n";
  for (const KernelInfo& kernel : workload.kernels) ptx += spin_entry(kernel.entry);
  return ptx;
}

std::string generate_catalog_json() {
  const nlohmann::json catalog{
      {"kernels", nlohmann::json::array({{{"match", "^gq_"}, {"model", "from_arg"}, {"arg", 0}, {"unit", "ns"}}})},
      {"default_us", 10},
      {"noise_cv", 0.0},
      {"seed", 1}};
  return catalog.dump(2) + "\n";
}

}  // namespace gpuqos::replay
