// The HTTP front's checks that need no HTTP library, so that tests can call them directly: the API key
// (case-insensitive "Bearer", compared in constant time), the Host header of a loopback server (DNS
// rebinding), the Origin of a browser request (CORS) and whether a client hung up.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::server {

// `authorization` is "Bearer KEY" (the scheme in any case, spaces around the key ignored). The time
// taken depends on the lengths only, never on where the key differs.
bool bearer_matches(std::string_view authorization, std::string_view key);

// An address that only this machine can reach: localhost, 127.x.x.x, ::1.
bool is_loopback_address(std::string_view host);

// A Host header value (host[:port], [v6]:port) allowed on a loopback bind: a loopback name or address
// with any port, or one of `extra` (compared without port, case-insensitive).
bool loopback_host_allowed(std::string_view host_header, const std::vector<std::string>& extra);

// May a page of `origin` ("scheme://host[:port]") call the API? Yes when it is listed in `allowed`
// (or `allowed` holds "*"), or when it is the server's own origin ("http://" + `host_header`).
bool origin_allowed(std::string_view origin, std::string_view host_header, const std::vector<std::string>& allowed);

// What a connected socket holds for reading now, without consuming it or blocking: a readiness wakeup
// is not proof of a hang-up (an edge-triggered reactor can report data already read), so only an
// orderly end (recv would return 0) or an error counts as the client gone.
enum class PeerState { Waiting, HasData, Gone };
PeerState peer_state(int fd);

// `s` for an error message: control characters, NULs and bytes above 0x7e as \xHH, at most 200 bytes.
std::string printable(std::string_view s);

}  // namespace dsv4::server
