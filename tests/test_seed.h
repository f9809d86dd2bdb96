// The seed of a randomized test: a fresh one each run (the test prints it, or puts it in
// its failures' trace), or QMM_TEST_SEED's value, which replays a failure.
#ifndef QMM_TESTS_TEST_SEED_H_
#define QMM_TESTS_TEST_SEED_H_

#include <cstdint>
#include <cstdlib>
#include <random>

namespace qmm {

inline uint64_t TestSeed() {
  if (const char* fixed = std::getenv("QMM_TEST_SEED")) return std::strtoull(fixed, nullptr, 10);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

}  // namespace qmm

#endif  // QMM_TESTS_TEST_SEED_H_
