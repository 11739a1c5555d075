#include "cc/gcsio/outcome.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "cc/gcsio/http_text.h"
#include "cc/gcsio/retry_policy.h"

namespace gcsio {
namespace {

bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// A character of an OAuth2 bearer token (RFC 6750 b64token: ALPHA DIGIT - . _ ~ + / and
// trailing '='); the token ends at the first other one, so the text after it is kept.
bool IsTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.' || c == '_' ||
         c == '~' || c == '+' || c == '/' || c == '=';
}

// A character of a Google OAuth2 access token after its "ya29." prefix.
bool IsAccessTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
}

bool IsWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

bool StartsWithBearer(std::string_view s) {
  static constexpr std::string_view kBearer = "bearer";
  if (s.size() <= kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != kBearer[i]) return false;
  }
  return IsSpace(s[kBearer.size()]);
}

// Keeps printable ASCII of a server's error body, tokens redacted, shortened, for messages.
std::string Snippet(std::string_view body) {
  std::string out;
  // Redact before cutting, so a token cut in half at the limit is not left behind.
  for (char c : RedactCredentials(body, "")) {
    out.push_back(std::isprint(static_cast<unsigned char>(c)) ? c : ' ');
  }
  return std::string(Trim(std::string_view(out).substr(0, 300)));
}

}  // namespace

Outcome MakeOutcome(Verdict verdict, std::string cause, long status, std::string message) {
  Outcome o;
  o.verdict = verdict;
  o.cause = std::move(cause);
  o.status = status;
  o.message = std::move(message);
  return o;
}

std::string RedactCredentials(std::string_view text, std::string_view secret) {
  static constexpr std::string_view kRedacted = "<redacted>";
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    std::string_view rest = text.substr(i);
    // The secret, or (when the body was cut short) a tail of text that starts it.
    const bool cut_secret =
        rest.size() >= 4 && rest.size() < secret.size() && secret.substr(0, rest.size()) == rest;
    if (!secret.empty() && (rest.substr(0, secret.size()) == secret || cut_secret)) {
      out += kRedacted;
      i += std::min(secret.size(), rest.size());
    } else if (StartsWithBearer(rest) &&
               (i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1])))) {
      size_t j = 6;
      while (j < rest.size() && IsSpace(rest[j])) ++j;
      out.append(rest.substr(0, j));
      size_t end = j;
      while (end < rest.size() && IsTokenChar(rest[end])) ++end;
      if (end > j) out += kRedacted;  // "Bearer <redacted>" (already redacted) stays as it is
      i += end;
    } else if (rest.size() > 5 && rest.substr(0, 5) == "ya29." && IsAccessTokenChar(rest[5]) &&
               (i == 0 || !IsWordChar(text[i - 1]))) {
      size_t end = 5;  // a Google access token standing anywhere, not only after "Bearer"
      while (end < rest.size() && IsAccessTokenChar(rest[end])) ++end;
      out += kRedacted;
      i += end;
    } else {
      out.push_back(text[i]);
      ++i;
    }
  }
  return out;
}

Outcome TransportOutcome(int curl_code, std::string_view detail) {
  const std::string text = std::string(curl_easy_strerror(static_cast<CURLcode>(curl_code))) +
                           (detail.empty() ? "" : " (" + std::string(detail) + ")");
  switch (curl_code) {
    case CURLE_COULDNT_CONNECT:
      return MakeOutcome(Verdict::kRetry, "connection_refused", 0, "connection failed: " + text);
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
      return MakeOutcome(Verdict::kRetry, "connection_reset", 0, "connection broken: " + text);
    case CURLE_GOT_NOTHING:
      return MakeOutcome(Verdict::kRetry, "connection_reset", 0, "empty reply: " + text);
    case CURLE_SEND_FAIL_REWIND:
      // A reused connection died before any answer; libcurl would resend the body on a new
      // one, which uploads refuse: the retry asks the session what it kept first.
      return MakeOutcome(Verdict::kRetry, "connection_reset", 0, "connection broken: " + text);
    case CURLE_OPERATION_TIMEDOUT:
      return MakeOutcome(Verdict::kRetry, "timeout", 0, "timed out: " + text);
    case CURLE_PARTIAL_FILE:
      return MakeOutcome(Verdict::kRetry, "short_body", 0, "body ended early: " + text);
    case CURLE_COULDNT_RESOLVE_HOST:
      return MakeOutcome(Verdict::kRetry, "dns", 0, "host lookup failed: " + text);
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return MakeOutcome(Verdict::kRetry, "connection_reset", 0, "HTTP/2 stream failed: " + text);
    default:
      return MakeOutcome(Verdict::kFail, "transport", 0, "transfer failed: " + text);
  }
}

Outcome StatusOutcome(long status, std::string_view body, std::string_view bucket,
                      std::string_view object, std::string_view credential,
                      int64_t pinned_generation) {
  const std::string snippet = Snippet(body);
  const std::string tail = snippet.empty() ? "" : ": " + snippet;
  const std::string code = "HTTP " + std::to_string(status);
  const std::string cause = "http_" + std::to_string(status);
  if (IsRetryableStatus(status)) return MakeOutcome(Verdict::kRetry, cause, status, code + tail);
  if (pinned_generation > 0 && (status == 404 || status == 412)) {
    // The GET named the generation this read is pinned to: the object was replaced (or
    // deleted) since, which is not "it never existed".
    Outcome o =
        MakeOutcome(Verdict::kFail, kGenerationChanged, status,
                    "object changed during read: generation " + std::to_string(pinned_generation) +
                        " is no longer the object's (" + code +
                        (status == 412 ? " precondition failed" : " not found") + ")" + tail);
    o.pinned_generation = pinned_generation;
    return o;
  }
  if (status == 412) {
    return MakeOutcome(Verdict::kFail, kGenerationChanged, status,
                       code + " precondition failed: the object changed during the read" + tail);
  }
  if (status == 404) {
    return MakeOutcome(Verdict::kFail, cause, status,
                       code + " not found: bucket '" + std::string(bucket) + "' or object '" +
                           std::string(object) + "' does not exist" + tail);
  }
  if (status == 401 || status == 403) {
    return MakeOutcome(
        Verdict::kFail, cause, status,
        code + " permission denied for credential " + std::string(credential) + tail);
  }
  if (status == 416) {
    return MakeOutcome(
        Verdict::kFail, cause, status,
        code + " range not satisfiable: the range starts past the end of the object" + tail);
  }
  return MakeOutcome(Verdict::kFail, cause, status, code + tail);
}

}  // namespace gcsio
