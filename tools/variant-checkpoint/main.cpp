// dsv4-variant: writes a tiny checkpoint of another DeepSeek-V4 variant (see README.md here).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "variant_checkpoint.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: dsv4-variant nvfp4 SRC DST        lossless MXFP4 -> NVFP4 cast of the routed experts\n"
               "       dsv4-variant fp8-experts SRC DST  routed experts re-quantized to FP8 e4m3 128x128 (Base layout)\n"
               "       dsv4-variant dspark SRC DST       0731 layout: 3 DSpark stages (random) + dspark_* config\n"
               "       dsv4-variant pro DST [LAYERS]     random Pro-shaped stack at reduced width (default 5 layers)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string cmd = argv[1];
  try {
    dsv4::variants::Report r;
    if (cmd == "nvfp4" && argc == 4) {
      r = dsv4::variants::cast_nvfp4(argv[2], argv[3]);
    } else if (cmd == "fp8-experts" && argc == 4) {
      r = dsv4::variants::requant_fp8_experts(argv[2], argv[3]);
    } else if (cmd == "dspark" && argc == 4) {
      r = dsv4::variants::add_dspark(argv[2], argv[3], 3, 1);
    } else if (cmd == "pro" && (argc == 3 || argc == 4)) {
      const int layers = argc == 4 ? std::atoi(argv[3]) : 5;
      r = dsv4::variants::synth(dsv4::variants::pro_like_config(layers), argv[2], 1);
    } else {
      return usage();
    }
    std::printf("%zu tensors written or converted; %zu elements changed value (max |change| %g)\n", r.tensors, r.inexact,
                r.max_abs);
  } catch (const dsv4::Error& e) {
    std::fprintf(stderr, "dsv4-variant: %s\n", e.what());
    return 1;
  }
  return 0;
}
