// Bearer-token cache: asks the token source only when the cached token is near its expiry.
// Tokens are kept out of every message this library produces.
#ifndef CC_GCSIO_TOKEN_CACHE_H_
#define CC_GCSIO_TOKEN_CACHE_H_

#include <functional>
#include <mutex>
#include <string>

namespace gcsio {

struct Token {
  std::string value;
  double expires_at_s = 0;  // seconds since the Unix epoch (wall clock); 0 = unknown
};

// Returns a fresh token; throws std::runtime_error (message without the token) on failure.
using TokenSource = std::function<Token()>;

class TokenCache {
 public:
  // An empty `source` means "send no Authorization header". A token with a known expiry is
  // refreshed once less than min(refresh_margin_s, half its lifetime) remains; one with an
  // unknown expiry is asked for again after unknown_ttl_s.
  TokenCache(TokenSource source, double refresh_margin_s, double unknown_ttl_s)
      : source_(std::move(source)), margin_s_(refresh_margin_s), unknown_ttl_s_(unknown_ttl_s) {}

  bool enabled() const { return static_cast<bool>(source_); }

  // The current token ("" when disabled). May call the source; throws what it throws. Callers
  // that hold a lock the source might need (e.g. Python's GIL) must release it first.
  std::string Get();

 private:
  TokenSource source_;
  double margin_s_;
  double unknown_ttl_s_;
  std::mutex mu_;
  Token cached_;
  double refresh_at_s_ = 0;  // wall-clock time after which the source is asked again
  bool have_ = false;
};

double WallClockSeconds();

// When a token fetched at `now_s` should be replaced (see TokenCache).
double RefreshTime(const Token& token, double now_s, double margin_s, double unknown_ttl_s);

}  // namespace gcsio

#endif  // CC_GCSIO_TOKEN_CACHE_H_
