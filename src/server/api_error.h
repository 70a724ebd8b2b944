// Errors answered to API clients: an HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}. Route code throws ApiError (or lets a dsv4::Error
// or RequestRejected through); the HTTP layer's one wrapper turns any exception into this shape.
#pragma once
#include <exception>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace dsv4::server {

using Json = nlohmann::ordered_json;

// The message is made one line (control bytes escaped) and cut at 400 bytes.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "");
  int status;
  std::string type;   // invalid_request_error, authentication_error, server_error
  std::string param;  // the request field at fault ("" = none)
  std::string code;   // e.g. context_length_exceeded, model_not_found ("" = none)
};

// 400 invalid_request_error about `param`.
ApiError invalid_request(const std::string& message, const std::string& param = "", const std::string& code = "");

Json error_json(const ApiError& e);

// The ApiError for whatever was thrown: ApiError as is; RequestRejected by reason (400 invalid or
// too long, 503 overloaded or stopping); other dsv4::Error (user input at a boundary) 400; JSON
// errors 400; anything else 500.
ApiError to_api_error(std::exception_ptr e, const std::string& prompt_param = "");

}  // namespace dsv4::server
