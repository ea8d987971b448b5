#pragma once
// The errors the SDK throws. Every failure is a switchboard::Error; the two kinds below say
// whether the server answered (ServerError, with its code and message) or could not be reached
// (ConnectionError).
#include <stdexcept>
#include <string>

namespace switchboard {

class Error : public std::runtime_error {
 public:
  Error(std::string code, std::string message)
      : std::runtime_error(code + ": " + message),
        code_(std::move(code)),
        message_(std::move(message)) {}
  // The server's code ("NOT_FOUND", "CONFLICT", ...) or one of the SDK's own:
  // "CONNECTION_FAILED", "TIMEOUT", "INVALID_RESPONSE", "RECONNECT_FAILED", "SUPERSEDED".
  const std::string& code() const noexcept { return code_; }
  // The message without the code.
  const std::string& message() const noexcept { return message_; }

 private:
  std::string code_;
  std::string message_;
};

// The server answered with an error body {"error": {"code", "message"}} (docs/api.md).
class ServerError : public Error {
 public:
  ServerError(unsigned status, std::string code, std::string message)
      : Error(std::move(code), std::move(message)), status_(status) {}
  // The HTTP status (400, 404, 409, ...); 0 when the error came over a WebSocket.
  unsigned status() const noexcept { return status_; }

 private:
  unsigned status_;
};

// The server could not be reached, the connection broke, or it did not answer in time
// (code "CONNECTION_FAILED" or "TIMEOUT"), or it answered something that is not the API
// ("INVALID_RESPONSE").
class ConnectionError : public Error {
 public:
  using Error::Error;
};

}  // namespace switchboard
