// DeviceContext, checked calls, device buffers, and the harness's own guard checks.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/buffer.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/ops.h"
#include "core/error.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

// Runs without a GPU: the error path only formats the status.
TEST(CudaCheck, ThrowsWithLocationAndErrorText) {
  try {
    DSV4_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "no exception";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test_context.cpp:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
    EXPECT_NE(msg.find("invalid argument"), std::string::npos) << msg;
  }
  try {
    DSV4_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(DSV4_CUDA_CHECK(cudaSuccess));
}

TEST(CudaContext, CreatesStreamHandleWorkspace) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  EXPECT_NE(ctx.stream(), nullptr);
  EXPECT_NE(ctx.lt(), nullptr);
  EXPECT_NE(ctx.workspace(), nullptr);
  EXPECT_GT(ctx.sm_count(), 0);
  EXPECT_EQ(ctx.cc_major(), 9);
  std::printf("[device] %s, %d SMs, %zu bytes opt-in shared memory per block\n", ctx.name().c_str(), ctx.sm_count(),
              ctx.max_smem_per_block());
  ctx.synchronize();
}

TEST(CudaBuffer, RoundTripAndMove) {
  DSV4_REQUIRE_HOPPER();
  std::vector<int> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = int(i * 7 - 3);
  DeviceBuffer<int> a(host);
  EXPECT_EQ(a.size(), host.size());
  DeviceBuffer<int> b = std::move(a);
  EXPECT_EQ(a.get(), nullptr);
  EXPECT_EQ(b.download(), host);
  EXPECT_THROW(b.upload(host.data(), host.size(), 1), Error);  // overflow by one element
}

TEST(CudaBuffer, AllocationFailureThrows) {
  DSV4_REQUIRE_HOPPER();
  EXPECT_THROW(DeviceBuffer<char>(size_t(1) << 50), Error);  // a petabyte
}

TEST(CudaOps, BadShapesThrowBeforeLaunch) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  DeviceBuffer<uint16_t> x(64);
  RmsNormParams p;
  p.x = reinterpret_cast<const bf16*>(x.get());
  p.y = reinterpret_cast<bf16*>(x.get());
  p.rows = 1;
  p.dim = 12;  // not a multiple of 8
  p.x_stride = p.y_stride = 16;
  EXPECT_THROW(rms_norm(ctx, p), Error);
}

// The harness must catch what it exists to catch.
TEST(CudaHarness, GuardsCatchOutOfBoundsAndUnwritten) {
  DSV4_REQUIRE_HOPPER();
  {
    Guarded<float> out(100);
    DSV4_CUDA_CHECK(cudaMemset(out.get(), 0, 101 * sizeof(float)));  // one element too many
    EXPECT_NONFATAL_FAILURE(out.download("oob"), "guard elements overwritten");
  }
  {
    Guarded<float> out(100);
    DSV4_CUDA_CHECK(cudaMemset(out.get(), 0, 99 * sizeof(float)));  // last element never written
    EXPECT_NONFATAL_FAILURE(out.download("short"), "never written");
  }
  {
    Guarded<float> out(100);
    DSV4_CUDA_CHECK(cudaMemset(out.get(), 0, 100 * sizeof(float)));
    EXPECT_EQ(out.download("exact").size(), 100u);
  }
}

TEST(CudaHarness, CompareReportsWorstElement) {
  std::vector<float> ref = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> got = {1.0f, 2.001f, 3.5f, 4.0f};
  CompareResult r;
  EXPECT_NONFATAL_FAILURE(r = compare("self-test", got, ref, Tol::Bf16), "FAIL");
  EXPECT_EQ(r.worst, 2u);
  EXPECT_EQ(r.bad, 1u);
  std::vector<float> nan_got = {1.0f, NAN, 3.0f, 4.0f};
  EXPECT_NONFATAL_FAILURE(r = compare("nan-self-test", nan_got, ref, Tol::Bf16), "FAIL");
  EXPECT_EQ(r.nan_mismatch, 1u);
}

}  // namespace
}  // namespace dsv4::cuda::test
