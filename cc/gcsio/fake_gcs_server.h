// Test-only GCS media endpoint on 127.0.0.1: serves ranged GETs of in-memory objects at
// /download/storage/v1/b/{bucket}/o/{object}?alt=media and resumable uploads
// (POST /upload/storage/v1/b/{bucket}/o?uploadType=resumable&name=..., PUT chunks and status
// queries to the session URL, 308 + Range, the final object resource with size, generation and
// crc32c; ifGenerationMatch honoured) over HTTP/1.1 keep-alive, answers each request as a test
// script says (serve, status, short body, hang; for uploads also: keep part of a chunk and
// drop the connection, report a wrong crc32c, expire the session), can hold answers until a
// number of requests wait at once, and records every request it saw.
//
// Why our own (~250 lines of POSIX sockets): the range reader tests need to see how many requests
// are in flight at once and to fail chosen attempts; the project's LocalGCS and fault proxy are
// Python (not reachable from a cc_test), and no C++ HTTP server library is a dependency.
#ifndef CC_GCSIO_FAKE_GCS_SERVER_H_
#define CC_GCSIO_FAKE_GCS_SERVER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace gcsio {

class FakeGcsServer {
 public:
  // One parsed request.
  struct Request {
    int index = 0;  // arrival order, from 0
    std::string bucket;
    std::string object;         // percent-decoded
    int64_t generation = 0;     // the URL's generation= parameter, 0 if absent
    std::string range;          // Range header value, e.g. "bytes=0-99"
    uint64_t first = 0;         // parsed from `range`
    uint64_t last = 0;          // inclusive
    std::string authorization;  // Authorization header value, "" if absent
    // Uploads.
    std::string method;         // "GET", "POST", "PUT"
    std::string kind;           // "media", "upload_start", "upload_chunk", "upload_query"
    std::string upload_id;      // the session of a PUT
    std::string content_range;  // Content-Range of a PUT, e.g. "bytes 0-99/300", "bytes */300"
    uint64_t body_bytes = 0;    // request body length
    int64_t if_generation_match = -1;  // -1 if absent
  };

  enum class Action {
    kServe,      // 206 with the requested bytes (404 / 416 when the object / range is absent)
    kStatus,     // `status` with `body`
    kShortBody,  // 206 headers for the whole range, `body_bytes` of it, then close
    kHang,       // 206 headers and `body_bytes` of the range, then wait for ReleaseHung()
    // Uploads (PUT to a session):
    kKeepPartAndReset,  // keep the chunk's first `body_bytes` bytes, close without answering
    kWrongCrc32c,       // complete as usual, but the object resource names another crc32c
    kExpireSession,     // forget the session and answer `status` (404 or 410)
  };
  struct Reply {
    Action action = Action::kServe;
    int status = 200;
    std::string body;
    uint64_t body_bytes = 0;
  };
  using Script = std::function<Reply(const Request&)>;

  FakeGcsServer();   // listens on 127.0.0.1 (a free port); throws std::runtime_error
  ~FakeGcsServer();  // closes every connection, joins every thread
  FakeGcsServer(const FakeGcsServer&) = delete;
  FakeGcsServer& operator=(const FakeGcsServer&) = delete;

  std::string endpoint() const;  // "http://127.0.0.1:PORT"

  // Stores an object; answers carry x-goog-generation `generation`.
  void Put(const std::string& bucket, const std::string& object, std::string data,
           int64_t generation = 1);
  // An object's bytes and generation (false if absent), e.g. after an upload.
  bool Get(const std::string& bucket, const std::string& object, std::string* data,
           int64_t* generation) const;
  // Decides each request's answer (default: always kServe).
  void SetScript(Script script);
  // Holds every answer until `n` requests wait at once, then answers all and holds no more.
  void HoldUntilConcurrent(int n);
  // Lets hung answers send the rest of their range (to a client that may have gone).
  void ReleaseHung();

  std::vector<Request> requests() const;
  int request_count() const;
  // Most requests being answered at once (from the end of their headers to their last byte).
  int max_concurrent() const;
  // Blocks until `n` requests arrived; false if that took over `timeout_s` (a broken test).
  bool WaitForRequests(int n, double timeout_s) const;
  // Blocks until `n` hung answers ended; false after `timeout_s`.
  bool WaitForHungEnded(int n, double timeout_s) const;

 private:
  void AcceptLoop();
  void Serve(int fd);
  // Answers one request on `fd`; false when the connection must close.
  bool Answer(int fd, const Request& request, const Reply& reply);
  std::string ObjectBytes(const std::string& bucket, const std::string& object, bool* found,
                          int64_t* generation) const;
  bool AnswerUpload(int fd, const Request& request, const Reply& reply, const std::string& body);

  struct Session {
    std::string bucket, object;
    uint64_t total = 0;
    std::string data;  // committed bytes
    int64_t if_generation_match = -1;
    bool finished = false;
    std::string resource;  // the object resource once finished
  };

  int listen_fd_ = -1;
  int port_ = 0;
  std::thread acceptor_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool stopping_ = false;
  std::map<std::pair<std::string, std::string>, std::pair<std::string, int64_t>> objects_;
  Script script_;
  std::vector<Request> requests_;
  int active_ = 0;
  int max_active_ = 0;
  int hold_until_ = 0;  // > 0 while answers are held
  bool hung_released_ = false;
  int hung_ended_ = 0;
  std::set<int> connections_;
  std::map<std::string, Session> sessions_;
  int next_session_ = 0;
  int64_t next_generation_ = 1000;
  std::vector<std::thread> handlers_;
};

// `n` bytes of a fixed pseudo-random pattern (xorshift64 seeded by `seed`): object contents
// for the tests, different for each seed, the same on every run.
std::string TestPattern(uint64_t n, uint32_t seed);

}  // namespace gcsio

#endif  // CC_GCSIO_FAKE_GCS_SERVER_H_
