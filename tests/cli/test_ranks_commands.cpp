// --ranks N and the TCP rank group (runtime/rank_group.h) through the real binary: N expert-parallel
// ranks print the same greedy text and write the same logits file, byte for byte, as one rank; two
// `dsv4 logits` processes joined by the rendezvous (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) give
// the one-process file from rank 0 and nothing from rank 1; bad values are one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "support/free_port.h"
#include "support/run_command.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using test::free_port;
using test::run_command;

std::string bin() { return test::dsv4_binary(); }

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("dsv4-ranks-" + std::to_string(std::random_device{}()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

// `dsv4 run` greedy on the bundled model over `ranks` ranks, stdout only.
std::string run_greedy(int ranks) {
  return bin() + " run --device cpu --ranks " + std::to_string(ranks) + " --temp 0 --raw -q -n 16 'ROMEO:' 2>/dev/null";
}

TEST(Ranks, RunGreedyTextEqualsOneRank) {
  const auto one = run_command(run_greedy(1));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_GT(one.output.size(), 8u) << one.output;
  for (int n : {2, 4}) {
    const auto r = run_command(run_greedy(n));
    EXPECT_EQ(r.exit_code, 0) << n << " ranks: " << r.output;
    EXPECT_EQ(r.output, one.output) << n << " ranks";
  }
  // Speculative decoding over ranks: the MTP block's calls are announced like the main stack's (the
  // MTP layer's routed experts are split too), and greedy speculative text is greedy text.
  for (int n : {1, 2}) {
    const auto r = run_command(run_greedy(n) + " --speculative 2");
    EXPECT_EQ(r.exit_code, 0) << n << " ranks, --speculative 2: " << r.output;
    EXPECT_EQ(r.output, one.output) << n << " ranks, --speculative 2";
  }
}

// Logits of 11 tokens fed in three chunks (prefill pieces and a 1-token chunk).
std::string logits_args(const TempDir& d, const std::string& out) {
  std::ofstream(d / "tokens.json") << "[1, 5, 9, 33, 2, 7, 100, 4, 8, 3, 11]";
  return " logits --device cpu --tokens " + d / "tokens.json" + " --schedule chunks:4,3,1,3 --out " + out;
}

// With --mtp too: the MTP block's calls (its own split MoE layer) go through the ranks as well.
TEST(Ranks, LogitsFileIsByteIdentical) {
  for (const std::string mtp : {"", " --mtp"}) {
    TempDir d;
    const auto one = run_command(bin() + logits_args(d, d / "one.safetensors") + mtp);
    ASSERT_EQ(one.exit_code, 0) << mtp << ": " << one.output;
    const auto two = run_command(bin() + logits_args(d, d / "two.safetensors") + mtp + " --ranks 2");
    ASSERT_EQ(two.exit_code, 0) << mtp << ": " << two.output;
    const std::string want = read_bytes(d / "one.safetensors");
    ASSERT_GT(want.size(), (mtp.empty() ? 11u : 21u) * 1026u * 4u) << mtp;
    EXPECT_TRUE(read_bytes(d / "two.safetensors") == want) << mtp;
  }
}

// The MTP block's calls included (--mtp): rank 0 announces each call's kind in its "call" byte.
TEST(Ranks, TwoProcessesOverTheRendezvousWriteTheOneProcessFile) {
  TempDir d;
  auto mtp_args = [](const TempDir& d, const std::string& out) { return logits_args(d, out) + " --mtp"; };
  const auto one = run_command(bin() + mtp_args(d, d / "one.safetensors"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " WORLD_SIZE=2 DSV4_COMM_TIMEOUT=60";
  // Rank 1 in the background (its exit status in a file), rank 0 in front; both must exit 0.
  const std::string cmd = "(env " + env + " RANK=1 LOCAL_RANK=1 " + bin() + mtp_args(d, d / "r1.safetensors") +
                          " > " + d / "r1.log" + " 2>&1; echo $? > " + d / "r1.rc) & env " + env +
                          " RANK=0 LOCAL_RANK=0 " + bin() + mtp_args(d, d / "r0.safetensors") + "; rc=$?; wait; exit $rc";
  const auto r = run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_bytes(d / "r1.rc"), "0\n") << read_bytes(d / "r1.log");
  EXPECT_EQ(read_bytes(d / "r1.log"), "");  // rank 1 writes nothing
  EXPECT_FALSE(fs::exists(d / "r1.safetensors"));
  EXPECT_TRUE(read_bytes(d / "r0.safetensors") == read_bytes(d / "one.safetensors"));
}

// `dsv4 chat` over a TCP group with DSV4_COMM_TIMEOUT=2: rank 0's user thinks 5 s between two turns,
// rank 1 waits for the next call without a limit, and the replies are one process's; then rank 0 dies
// (SIGKILL) while rank 1 waits for its next call, and rank 1 ends at once with one line. A "/help" after
// each turn marks its end in rank 0's output (a command flushes it).
TEST(Ranks, ChatOverTcpWaitsForTheNextTurnAndEndsWhenRank0Dies) {
  TempDir d;
  const std::string args = " chat --device cpu --temp 0 -n 8 ";
  const auto one = run_command("printf 'hello there\\n/help\\nand then?\\n/help\\n' | " + bin() + args + " >" +
                               d / "one.out");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::string replies = read_bytes(d / "one.out");
  ASSERT_NE(replies.find("/exit, /quit"), std::string::npos) << replies;
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " WORLD_SIZE=2 DSV4_COMM_TIMEOUT=2";
  std::ofstream(d / "chat.sh") << "cd " << d / "" << "\n"
                               << "mkfifo in && : >r0.out\n"
                               << "env " << env << " RANK=1 LOCAL_RANK=1 " << bin() << args << " </dev/null >r1.out 2>r1.err & pid1=$!\n"
                               << "env " << env << " RANK=0 LOCAL_RANK=0 " << bin() << args << " <in >r0.out 2>r0.err & pid0=$!\n"
                               << R"sh(exec 3>in
# Sends a message and /help, then waits (30 s at most) until rank 0 printed the help $2 times.
turn() {
  printf '%s\n/help\n' "$1" >&3
  i=0
  until [ "$(grep -c '^/exit, /quit' r0.out)" -ge "$2" ]; do
    i=$((i + 1))
    if [ $i -gt 600 ]; then kill -9 $pid0 $pid1; exit 9; fi
    sleep 0.05
  done
}
turn 'hello there' 1
sleep 5
turn 'and then?' 2
kill -9 $pid0
t0=$(date +%s%N)
wait $pid1
echo $? > r1.rc
echo $(( ($(date +%s%N) - t0) / 1000000 )) > r1.ms
exec 3>&-
wait $pid0
exit 0
)sh";
  const auto r = run_command("sh " + d / "chat.sh");
  ASSERT_EQ(r.exit_code, 0) << r.output << read_bytes(d / "r0.err") << read_bytes(d / "r1.err");
  EXPECT_EQ(read_bytes(d / "r0.out"), replies) << read_bytes(d / "r0.err");
  EXPECT_EQ(read_bytes(d / "r1.out"), "");
  EXPECT_EQ(read_bytes(d / "r1.rc"), "1\n");
  const std::string err = read_bytes(d / "r1.err");
  EXPECT_EQ(count_lines(err), 1) << err;
  EXPECT_EQ(err.rfind("dsv4: error: rank group: rank 1 waited for rank 0's next call: tcp comm: lost the connection to "
                      "rank 0 (all_gather): ",
                      0),
            0u)
      << err;
  EXPECT_LT(std::stoi(read_bytes(d / "r1.ms")), 5000) << "rank 1 ended " << read_bytes(d / "r1.ms") << " ms after rank 0 died";
}

// `cmd` (a shell command line) fails with one line of output containing `what`.
void expect_one_line_error(const std::string& cmd, const std::string& what) {
  const auto r = run_command(cmd);
  EXPECT_NE(r.exit_code, 0) << cmd;
  EXPECT_EQ(count_lines(r.output), 1) << cmd << ": " << r.output;
  EXPECT_NE(r.output.find(what), std::string::npos) << cmd << ": " << r.output;
}

TEST(Ranks, PerplexityEqualsOneRank) {
  TempDir d;
  std::ofstream(d / "text.txt") << "ROMEO:\nBut soft, what light through yonder window breaks?\n";
  const std::string args = " perplexity --device cpu -q -f " + d / "text.txt" + " --window 16 --stride 8 2>/dev/null";
  const auto one = run_command(bin() + args);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_NE(one.output, "");
  const auto two = run_command(bin() + args + " --ranks 2");
  EXPECT_EQ(two.exit_code, 0) << two.output;
  EXPECT_EQ(two.output, one.output);
}

TEST(Ranks, BadValuesAreOneLineErrors) {
  expect_one_line_error(bin() + " run --device cpu -q -n 2 --ranks 0 x", "--ranks: expected a positive number of ranks, got 0");
  expect_one_line_error(bin() + " run --device cpu -q -n 2 --ranks 3 x", "8 routed experts do not split evenly over 3 ranks");
  TempDir d;
  std::ofstream(d / "text.txt") << "ROMEO:\n";
  expect_one_line_error(bin() + " perplexity --device cpu -q --ranks -2 -f " + d / "text.txt",
                        "--ranks: expected a positive number of ranks, got -2");
  expect_one_line_error(bin() + logits_args(d, d / "x.safetensors") + " --ranks 3", "do not split evenly over 3 ranks");
  expect_one_line_error(bin() + " run --device cpu -q -n 2 --gpus 0 x", "--gpus: expected a positive number of GPUs, got 0");
  expect_one_line_error(bin() + " run --device cpu -q -n 2 --gpus 2 x",
                        "--gpus 2: needs --device cuda (on the CPU, --ranks N runs the same split)");
  EXPECT_FALSE(fs::exists(d / "x.safetensors"));
}

TEST(Ranks, RendezvousErrorsAreOneLine) {
  TempDir d;
  const std::string args = logits_args(d, d / "x.safetensors");
  expect_one_line_error("env MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 " + bin() + args + " --ranks 2",
                        "--ranks 2 with WORLD_SIZE=2: one or the other");
  expect_one_line_error("env MASTER_ADDR=127.0.0.1 MASTER_PORT=abc WORLD_SIZE=2 RANK=0 " + bin() + args,
                        "MASTER_PORT: expected the TCP port rank 0 listens on (1 to 65535), got 'abc'");
  expect_one_line_error("env MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=5 " + bin() + args, "RANK:");
  // Rank 1 alone: rank 0 never listens; it gives up after DSV4_COMM_TIMEOUT seconds with one line.
  const int port = free_port();
  ASSERT_GT(port, 0);
  expect_one_line_error("env MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                            " WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 DSV4_COMM_TIMEOUT=1 " + bin() + args,
                        "rendezvous: rank 1 could not reach rank 0 at MASTER_ADDR:MASTER_PORT = 127.0.0.1:" +
                            std::to_string(port) + " within 1 s");
  EXPECT_FALSE(fs::exists(d / "x.safetensors"));
}

}  // namespace
}  // namespace dsv4
