#include "cc/gcsio/token_cache.h"

#include <algorithm>
#include <chrono>

namespace gcsio {

double WallClockSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double RefreshTime(const Token& token, double now_s, double margin_s, double unknown_ttl_s) {
  if (token.expires_at_s <= 0) return now_s + unknown_ttl_s;
  const double lifetime = token.expires_at_s - now_s;
  return token.expires_at_s - std::min(margin_s, std::max(0.0, lifetime / 2));
}

std::string TokenCache::Get() {
  if (!source_) return "";
  std::lock_guard<std::mutex> lock(mu_);
  const double now = WallClockSeconds();
  if (!have_ || now >= refresh_at_s_) {
    cached_ = source_();
    have_ = true;
    refresh_at_s_ = RefreshTime(cached_, now, margin_s_, unknown_ttl_s_);
  }
  return cached_.value;
}

}  // namespace gcsio
