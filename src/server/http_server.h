// The HTTP front: binds the route table to an asynchronous HTTP/1.1 server (Boost.Beast over Asio),
// with the one wrapper that turns exceptions into OpenAI error JSON, the transport's limits, API-key,
// Host and CORS checks, streaming bodies (a client that goes away cancels its request) and per-route
// request counting. Only http_server*.cpp know the HTTP library.
//
// Threads: a few I/O threads serve every connection (a connection, or a stream, is not a thread);
// streamed bodies are pulled from their ReplyStream by a timer, never by a blocking wait. POST
// handlers (parse a body, submit to the engine) run on a small worker pool so that a large body or a
// slow handler never delays another connection; GET handlers answer from memory on the I/O thread.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "server/context.h"

namespace dsv4::server {

// Every limit is checked before any work on the request; docs/server.md "Limits" lists them.
struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0: a free port (bind() tells which)
  std::string api_key;                // when set, /v1/* needs "Authorization: Bearer KEY"
  int io_threads = 2;                 // threads serving all connections
  int workers = 4;                    // threads running POST handlers
  int max_connections = 4096;         // more get 503 (capped below the process's open-file limit)
  size_t max_body_bytes = 16u << 20;  // larger bodies get 413, whatever the transfer encoding
  size_t max_header_bytes = 32u << 10;  // request line + headers; more: 431
  int max_headers = 128;                // header fields; more: 431
  double header_timeout_s = 10;       // the whole request head, from its first byte (slowloris): 408
  double body_timeout_s = 60;         // the whole body; also the longest a response write may stall
  double idle_timeout_s = 5;          // a keep-alive connection waiting for its next request
  // Origins (scheme://host[:port]) whose pages may call the API (CORS); "*" = any. A request from
  // another origin gets 403; same-origin requests (Origin matches Host) are always allowed.
  std::vector<std::string> allowed_origins;
  // On a loopback bind only Host values of localhost, 127.x.x.x and [::1] (any port) are accepted,
  // plus these (DNS rebinding); other binds accept any Host.
  std::vector<std::string> allowed_hosts;
};

class HttpServer {
 public:
  HttpServer(ServerContext& ctx, HttpOptions opt);
  ~HttpServer();
  int bind();  // starts listening; returns the port. Throws dsv4::Error when the address is taken.
  void run();  // serves connections on the I/O threads until stop()
  // Shutdown begins: idle keep-alive connections and those still sending a request close at once;
  // every later response closes its connection. Requests being answered and streams go on.
  void drain();
  void stop();  // closes every connection, cancels the streams left, ends run()

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::server
