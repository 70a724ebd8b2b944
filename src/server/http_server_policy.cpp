#include "server/http_server_policy.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cstdio>

namespace dsv4::server {
namespace {

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The host part of "host", "host:port", "[v6]" or "[v6]:port" (brackets kept), lowercase.
std::string host_part(std::string_view h) {
  h = trim(h);
  if (!h.empty() && h.front() == '[') {
    const size_t close = h.find(']');
    h = close == std::string_view::npos ? h : h.substr(0, close + 1);
  } else if (const size_t colon = h.find(':'); colon != std::string_view::npos && h.find(':', colon + 1) == h.npos) {
    h = h.substr(0, colon);
  }
  std::string out(h);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (out.size() > 1 && out.back() == '.') out.pop_back();  // "localhost." is localhost
  return out;
}

bool is_127(std::string_view h) {
  int parts = 0;
  for (size_t at = 0; at <= h.size(); ++parts) {
    size_t dot = h.find('.', at);
    if (dot == std::string_view::npos) dot = h.size();
    const std::string_view p = h.substr(at, dot - at);
    if (p.empty() || p.size() > 3 || !std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        std::stoi(std::string(p)) > 255)
      return false;
    if (parts == 0 && p != "127") return false;
    at = dot + 1;
  }
  return parts == 4;
}

}  // namespace

bool bearer_matches(std::string_view authorization, std::string_view key) {
  std::string_view v = trim(authorization);
  const size_t space = v.find_first_of(" \t");
  if (space == std::string_view::npos || !iequal(v.substr(0, space), "bearer") || key.empty()) return false;
  const std::string_view token = trim(v.substr(space));
  // Every byte of the token is compared with a byte of the key; the sizes' difference is folded in.
  unsigned diff = token.size() != key.size() ? 1u : 0u;
  for (size_t i = 0; i < token.size(); ++i) diff |= unsigned(uint8_t(token[i]) ^ uint8_t(key[i % key.size()]));
  return diff == 0;
}

bool is_loopback_address(std::string_view host) {
  const std::string h = host_part(host);
  return h == "localhost" || h == "::1" || h == "[::1]" || is_127(h);
}

bool loopback_host_allowed(std::string_view host_header, const std::vector<std::string>& extra) {
  if (is_loopback_address(host_header)) return true;
  const std::string h = host_part(host_header);
  return std::any_of(extra.begin(), extra.end(), [&](const std::string& e) { return host_part(e) == h; });
}

bool origin_allowed(std::string_view origin, std::string_view host_header, const std::vector<std::string>& allowed) {
  origin = trim(origin);
  if (!host_header.empty() && iequal(origin, "http://" + std::string(trim(host_header)))) return true;
  return std::any_of(allowed.begin(), allowed.end(), [&](const std::string& a) { return a == "*" || iequal(a, origin); });
}

std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < 200; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

PeerState peer_state(int fd) {
  char c;
  for (;;) {
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return PeerState::HasData;
    if (n == 0) return PeerState::Gone;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? PeerState::Waiting : PeerState::Gone;
  }
}

}  // namespace dsv4::server
