#include "chat/py_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace dsv4::chat {

void py_escape_append(std::string& out, std::string_view s) {
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
}

std::string py_dumps_string(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  py_escape_append(out, s);
  out += '"';
  return out;
}

std::string py_float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits in scientific form: "d[.ddd]e[+-]XX".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t epos = sci.find('e');
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits = sci.substr(0, epos);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int ndig = int(digits.size());
  const int decpt = exp + 1;  // position of the decimal point relative to the digits
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(size_t(-decpt), '0') + digits;
    } else if (decpt >= ndig) {
      out += digits + std::string(size_t(decpt - ndig), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
    }
  } else {
    out += digits.substr(0, 1);
    if (ndig > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += e;
  }
  return out;
}

namespace {

// dump() recurses once per level; the parsers of untrusted text bound nesting far below this
// (json_text::kMaxJsonDepth), so a value this deep was built by code, not read, and is refused
// rather than allowed to overflow the stack.
constexpr int kMaxDumpDepth = 1000;

void dump(std::string& out, const nlohmann::ordered_json& v, int depth) {
  using T = nlohmann::ordered_json::value_t;
  if (v.is_structured() && depth >= kMaxDumpDepth) fail("cannot serialize JSON nested deeper than ", kMaxDumpDepth, " levels");
  switch (v.type()) {
    case T::null: out += "null"; break;
    case T::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case T::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case T::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case T::number_float: out += py_float_repr(v.get<double>()); break;
    case T::string: {
      out += '"';
      py_escape_append(out, v.get_ref<const std::string&>());
      out += '"';
      break;
    }
    case T::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        dump(out, e, depth + 1);
      }
      out += ']';
      break;
    }
    case T::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.items()) {
        if (!first) out += ", ";
        first = false;
        out += '"';
        py_escape_append(out, k);
        out += "\": ";
        dump(out, e, depth + 1);
      }
      out += '}';
      break;
    }
    default: fail("cannot serialize a JSON value of type ", v.type_name());
  }
}

}  // namespace

std::string py_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  dump(out, value, 0);
  return out;
}

std::string py_str(const nlohmann::ordered_json& v) {
  using T = nlohmann::ordered_json::value_t;
  switch (v.type()) {
    case T::null: return "None";
    case T::boolean: return v.get<bool>() ? "True" : "False";
    case T::string: return v.get<std::string>();
    case T::number_float: {
      std::string s = py_float_repr(v.get<double>());
      if (s == "NaN") return "nan";
      if (s == "Infinity") return "inf";
      if (s == "-Infinity") return "-inf";
      return s;
    }
    case T::number_integer:
    case T::number_unsigned: return py_dumps(v);
    default: fail("expected a string, got a JSON ", v.type_name());
  }
}

bool py_truthy(const nlohmann::ordered_json& v) {
  using T = nlohmann::ordered_json::value_t;
  switch (v.type()) {
    case T::null: return false;
    case T::boolean: return v.get<bool>();
    case T::number_integer: return v.get<int64_t>() != 0;
    case T::number_unsigned: return v.get<uint64_t>() != 0;
    case T::number_float: return v.get<double>() != 0.0;
    case T::string: return !v.get_ref<const std::string&>().empty();
    case T::array:
    case T::object: return !v.empty();
    default: return true;
  }
}

}  // namespace dsv4::chat
