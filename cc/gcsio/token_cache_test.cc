// Token cache: refresh timing, caching until a token is due, the disabled cache, errors of the
// source, and one source call for concurrent callers.
#include "cc/gcsio/token_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cc/gcsio/defaults.h"

namespace gcsio {
namespace {

constexpr double kMargin = defaults::kTokenRefreshMarginS;
constexpr double kUnknownTtl = defaults::kTokenUnknownTtlS;

TEST(TokenCacheTest, TokenRefreshTiming) {
  // Known expiry one hour out: refresh 300 s before it.
  EXPECT_EQ(RefreshTime(Token{"t", 4600}, 1000, 300, 60), 4300.0);
  // Short-lived token (4 min): refresh at half its lifetime instead of at once.
  EXPECT_EQ(RefreshTime(Token{"t", 1240}, 1000, 300, 60), 1120.0);
  // Unknown expiry: ask again after the fixed TTL.
  EXPECT_EQ(RefreshTime(Token{"t", 0}, 1000, 300, 60), 1060.0);
  // Already expired: due at once.
  EXPECT_EQ(RefreshTime(Token{"t", 900}, 1000, 300, 60), 900.0);
}

TEST(TokenCacheTest, CachesATokenUntilItIsDue) {
  int calls = 0;
  TokenCache cache(
      [&calls] {
        return Token{"tok" + std::to_string(++calls), 0};
      },
      kMargin, kUnknownTtl);
  EXPECT_TRUE(cache.enabled());
  EXPECT_EQ(cache.Get(), std::string("tok1"));
  EXPECT_EQ(cache.Get(), std::string("tok1"));  // cached (unknown expiry: kept for 60 s)
  EXPECT_EQ(calls, 1);

  // A token an hour from expiry is kept.
  int long_calls = 0;
  TokenCache long_lived(
      [&long_calls] {
        ++long_calls;
        return Token{"long", WallClockSeconds() + 3600};
      },
      kMargin, kUnknownTtl);
  EXPECT_EQ(long_lived.Get(), std::string("long"));
  EXPECT_EQ(long_lived.Get(), std::string("long"));
  EXPECT_EQ(long_calls, 1);
}

TEST(TokenCacheTest, ReplacesATokenThatIsDue) {
  // Expired when it arrives (expiry 1 s after the epoch): every Get asks the source again.
  int calls = 0;
  TokenCache cache(
      [&calls] {
        return Token{"tok" + std::to_string(++calls), 1.0};
      },
      kMargin, kUnknownTtl);
  EXPECT_EQ(cache.Get(), std::string("tok1"));
  EXPECT_EQ(cache.Get(), std::string("tok2"));
  EXPECT_EQ(cache.Get(), std::string("tok3"));
  EXPECT_EQ(calls, 3);
}

TEST(TokenCacheTest, DisabledCacheSendsNoToken) {
  TokenCache disabled({}, kMargin, kUnknownTtl);
  EXPECT_TRUE(!disabled.enabled());
  EXPECT_EQ(disabled.Get(), std::string(""));
}

TEST(TokenCacheTest, SourceErrorsPropagateAndTheNextGetAsksAgain) {
  int calls = 0;
  TokenCache cache(
      [&calls]() -> Token {
        if (++calls == 1) throw std::runtime_error("metadata server unreachable");
        return Token{"fresh", 0};
      },
      kMargin, kUnknownTtl);
  try {
    cache.Get();
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "metadata server unreachable");
  }
  EXPECT_EQ(cache.Get(), std::string("fresh"));
  EXPECT_EQ(calls, 2);
}

TEST(TokenCacheTest, ConcurrentCallersShareOneSourceCall) {
  std::atomic<int> calls{0};
  TokenCache cache(
      [&calls] {
        calls.fetch_add(1);
        return Token{"shared", 0};
      },
      kMargin, kUnknownTtl);
  std::vector<std::thread> threads;
  std::vector<std::string> got(8);
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&cache, &got, i] { got[i] = cache.Get(); });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& g : got) EXPECT_EQ(g, "shared");
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace gcsio
