// Minimal test assertions for the assert-based cc_test mains (gtest is not available offline).
// Unlike assert(), these stay on under -DNDEBUG.
#ifndef GCSCKPT_TESTS_CC_CHECK_H_
#define GCSCKPT_TESTS_CC_CHECK_H_

#include <cstdlib>
#include <iostream>

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond << std::endl; \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

#define CHECK_EQ(a, b)                                                                       \
  do {                                                                                       \
    const auto& check_a_ = (a);                                                              \
    const auto& check_b_ = (b);                                                              \
    if (!(check_a_ == check_b_)) {                                                           \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK_EQ failed: " #a " == " #b << " (" \
                << check_a_ << " vs " << check_b_ << ")" << std::endl;                       \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

// Expects `stmt` to throw `exc`.
#define CHECK_THROWS(stmt, exc)                                                                   \
  do {                                                                                            \
    bool check_threw_ = false;                                                                    \
    try {                                                                                         \
      stmt;                                                                                       \
    } catch (const exc&) {                                                                        \
      check_threw_ = true;                                                                        \
    }                                                                                             \
    if (!check_threw_) {                                                                          \
      std::cerr << __FILE__ << ":" << __LINE__ << ": expected " #exc " from " #stmt << std::endl; \
      std::abort();                                                                               \
    }                                                                                             \
  } while (0)

#endif  // GCSCKPT_TESTS_CC_CHECK_H_
