#include "cc/gcsio/metadata_client.h"

#include <curl/curl.h>

#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "cc/gcsio/response_check.h"
#include "cc/gcsio/url.h"

namespace gcsio {
namespace {

constexpr size_t kBodyLimit = 1 << 20;

size_t Collect(char* data, size_t size, size_t count, void* out) {
  auto* body = static_cast<std::string*>(out);
  const size_t n = size * count;
  if (body->size() + n > kBodyLimit) return 0;
  body->append(data, n);
  return n;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* s) const { curl_slist_free_all(s); }
};

}  // namespace

MetadataResult FetchObjectMetadata(Engine& engine, std::string_view bucket,
                                   std::string_view object) {
  const EngineOptions& opt = engine.options();
  const std::string url = MetadataUrl(opt.endpoint, bucket, object);
  std::mt19937_64 rng(std::random_device{}());
  const auto first = std::chrono::steady_clock::now();
  MetadataResult result;
  std::unique_ptr<CURL, CurlDeleter> easy(curl_easy_init());
  if (!easy) {
    result.error = "curl_easy_init failed";
    return result;
  }
  while (true) {
    ++result.attempts;
    result.body.clear();
    result.status = 0;
    Outcome outcome;
    std::unique_ptr<curl_slist, SlistDeleter> headers;
    try {
      const std::string token = engine.tokens().Get();
      if (!token.empty()) {
        headers.reset(curl_slist_append(nullptr, ("Authorization: Bearer " + token).c_str()));
      }
    } catch (const std::exception& e) {
      result.error = std::string("token_provider failed: ") + e.what();
      return result;
    }
    char errbuf[CURL_ERROR_SIZE] = {0};
    CURL* c = easy.get();
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &result.body);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opt.connect_timeout_s * 1000));
    // The whole answer is small: a stall-length limit on the full request bounds a hang.
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                     static_cast<long>((opt.connect_timeout_s + opt.stall_timeout_s) * 1000));
    engine.stats().AddRequest();
    const CURLcode code = curl_easy_perform(c);
    if (code != CURLE_OK) {
      outcome = TransportOutcome(code, errbuf);
    } else {
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &result.status);
      if (result.status == 200) {
        result.error.clear();
        return result;
      }
      outcome =
          StatusOutcome(result.status, result.body, bucket, object, opt.credential_description);
    }
    result.error = outcome.message;
    if (outcome.verdict != Verdict::kRetry) return result;
    const double backoff = BackoffSeconds(opt.retry, result.attempts, rng);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - first).count();
    if (!MayRetry(opt.retry, result.attempts, elapsed, backoff)) return result;
    engine.stats().AddRetry(outcome.cause);
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
  }
}

}  // namespace gcsio
