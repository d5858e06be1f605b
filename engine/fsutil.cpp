// File-system helpers over POSIX calls, so every failure reports the path and errno text.
#include "engine/fsutil.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "engine/check.h"

namespace pb {

namespace {

// Closes the descriptor on every exit path.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  auto fail = [&](const char* what) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot write {}: {} {}: {}", path, what, tmp, std::strerror(err)));
  };
  {
    Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (f.fd < 0) fail("open");
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::write(f.fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("write");
      done += static_cast<std::size_t>(n);
    }
    // Without the sync a power loss after the rename can leave an empty file in its place.
    if (::fsync(f.fd) != 0) fail("fsync");
    const int fd = f.fd;
    f.fd = -1;
    if (::close(fd) != 0) fail("close");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename");
}

std::string read_file(const std::string& path) {
  auto fail = [&] {
    throw UsageError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  };
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) fail();
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail();
  std::string out;
  out.reserve(S_ISREG(st.st_mode) ? static_cast<std::size_t>(st.st_size) : 0);
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail();  // e.g. EISDIR for a directory
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

void make_dirs(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("cannot create directory {}: {}", dir, ec.message()));
}

}  // namespace pb
