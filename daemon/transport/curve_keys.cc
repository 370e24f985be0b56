#include "daemon/transport/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace elastic::transport {
namespace {

constexpr std::size_t kZ85KeyChars = 40;

bool valid_z85_key(const std::string& text) { return curve_key_bytes(text).has_value(); }

// The first line that is neither empty nor a comment, trimmed.
Result<std::string> read_key_line(const std::string& path, const char* kind) {
  std::ifstream in(path);
  if (!in) return Error{"Cannot read the CURVE " + std::string(kind) + " key file " + path + "."};
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.pop_back();
    }
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    line = line.substr(first);
    if (!valid_z85_key(line)) {
      return Error{"The CURVE " + std::string(kind) + " key file " + path +
                   " does not hold a 40-character Z85 key."};
    }
    return line;
  }
  return Error{"The CURVE " + std::string(kind) + " key file " + path + " holds no key."};
}

Status write_file(const std::string& path, const std::string& content, mode_t mode,
                  bool exclusive) {
  std::FILE* file = nullptr;
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC);
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) return Error{"Cannot create " + path + ": " + std::strerror(errno) + "."};
  // open() applies the umask; fchmod makes the mode exact whatever the umask.
  if (::fchmod(fd, mode) != 0 || (file = ::fdopen(fd, "w")) == nullptr) {
    const int error = errno;
    ::close(fd);
    return Error{"Cannot set up " + path + ": " + std::strerror(error) + "."};
  }
  const bool written = std::fwrite(content.data(), 1, content.size(), file) == content.size();
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) return Error{"Cannot write " + path + "."};
  return ok_status();
}

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace

std::optional<std::string> curve_key_bytes(const std::string& z85) {
  std::string raw(32, '\0');
  if (z85.size() != kZ85KeyChars ||
      zmq_z85_decode(reinterpret_cast<std::uint8_t*>(raw.data()), z85.c_str()) == nullptr) {
    return std::nullopt;
  }
  return raw;
}

Status check_trusted_path(const std::string& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Error{"Cannot stat the " + std::string(what) + " " + path + ": " + std::strerror(errno) +
                 "."};
  }
  const uid_t self = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != self) {
    return Error{"The " + std::string(what) + " " + path + " is owned by uid " +
                 std::to_string(st.st_uid) + ", not by root or this process's user (uid " +
                 std::to_string(self) + "); whoever owns it can change who is trusted."};
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Error{"The " + std::string(what) + " " + path + " has mode " + mode_text(st.st_mode) +
                 ", which lets group or others write it (and so add a trusted key); run chmod "
                 "go-w " +
                 path + "."};
  }
  return ok_status();
}

Result<CurveKeyPair> generate_curve_keypair() {
  char public_key[kZ85KeyChars + 1] = {};
  char secret_key[kZ85KeyChars + 1] = {};
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return Error{std::string("Cannot generate a CURVE keypair: ") + zmq_strerror(zmq_errno()) +
                 " (is libzmq built with CURVE support?)."};
  }
  return CurveKeyPair{public_key, secret_key};
}

Status write_curve_keypair(const std::string& dir, const std::string& name,
                           const CurveKeyPair& keys) {
  std::error_code ec;
  // A directory made here gets 0755 whatever the umask: group-writable key directories are
  // refused when keys are loaded.
  if (std::filesystem::create_directories(dir, ec) && !ec) ::chmod(dir.c_str(), 0755);
  if (ec) return Error{"Cannot create the key directory " + dir + ": " + ec.message() + "."};
  const std::string secret_path = dir + "/" + name + ".key";
  const std::string public_path = dir + "/" + name + ".pub";
  if (Status s = write_file(secret_path,
                            "# elastic CURVE secret key of node " + name + "; keep it private\n" +
                                keys.secret_key + "\n",
                            0600, /*exclusive=*/true);
      !s.ok()) {
    return s;
  }
  return write_file(public_path,
                    "# elastic CURVE public key of node " + name + "\n" + keys.public_key + "\n",
                    0644, /*exclusive=*/false);
}

Result<CurveKeyPair> load_curve_secret_key(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Error{"Cannot read the CURVE secret key file " + path + ": " + std::strerror(errno) +
                 "."};
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return Error{"The CURVE secret key file " + path + " has mode " + mode_text(st.st_mode) +
                 ", which lets group or others read it; run chmod 600 " + path + "."};
  }
  if (st.st_uid != ::geteuid()) {
    return Error{"The CURVE secret key file " + path + " is owned by uid " +
                 std::to_string(st.st_uid) + ", not by this process's user (uid " +
                 std::to_string(::geteuid()) + "); run chown " + std::to_string(::geteuid()) + " " +
                 path + "."};
  }
  Result<std::string> secret = read_key_line(path, "secret");
  if (!secret.ok()) return secret.error();
  char public_key[kZ85KeyChars + 1] = {};
  if (zmq_curve_public(public_key, secret->c_str()) != 0) {
    return Error{"Cannot derive the public key from the CURVE secret key file " + path + "."};
  }
  return CurveKeyPair{public_key, *secret};
}

Result<std::string> load_curve_public_key(const std::string& path) {
  return read_key_line(path, "public");
}

Result<std::map<std::string, std::string>> load_curve_allow_list(const std::string& dir) {
  std::map<std::string, std::string> keys;
  if (Status trusted = check_trusted_path(dir, "public key directory"); !trusted.ok()) {
    return trusted.error();
  }
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return Error{"Cannot list the public key directory " + dir + ": " + ec.message() + "."};
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::filesystem::path& p = it->path();
    if (p.extension() != ".pub") continue;
    if (Status trusted = check_trusted_path(p.string(), "public key file"); !trusted.ok()) {
      return trusted.error();
    }
    Result<std::string> key = load_curve_public_key(p.string());
    if (!key.ok()) return key.error();
    keys[p.stem().string()] = *key;
  }
  if (ec) return Error{"Cannot list the public key directory " + dir + ": " + ec.message() + "."};
  return keys;
}

}  // namespace elastic::transport
