// File-system helpers over POSIX calls, so every failure reports the path and errno text.
#include "engine/fsutil.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
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

void write_all(int fd, const std::string& bytes, const std::function<void(const char*)>& fail) {
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write");
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  std::string target = path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // Replace what the link points at, not the link; a dangling link's target is created.
    char* real = ::realpath(path.c_str(), nullptr);
    if (real) {
      target = real;
      std::free(real);
    } else {
      char buf[PATH_MAX];
      const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
      if (n < 0) throw Error(fmt::format("cannot write {}: readlink: {}", path, std::strerror(errno)));
      const std::string link(buf, static_cast<std::size_t>(n));
      target = link[0] == '/' ? link : (std::filesystem::path(path).parent_path() / link).string();
    }
  }
  if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw Error(fmt::format("cannot write {}: it is a directory", path));
    // A device or FIFO: write through; renaming over it would replace the device node.
    auto fail = [&](const char* what) {
      throw Error(fmt::format("cannot write {}: {}: {}", path, what, std::strerror(errno)));
    };
    Fd f{::open(target.c_str(), O_WRONLY | O_CLOEXEC)};
    if (f.fd < 0) fail("open");
    write_all(f.fd, bytes, fail);
    const int fd = f.fd;
    f.fd = -1;
    if (::close(fd) != 0) fail("close");
    return;
  }
  const std::string tmp = target + ".tmp." + std::to_string(::getpid());
  auto fail = [&](const char* what) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot write {}: {} {}: {}", path, what, tmp, std::strerror(err)));
  };
  {
    Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (f.fd < 0) fail("open");
    write_all(f.fd, bytes, fail);
    // Without the sync a power loss after the rename can leave an empty file in its place.
    if (::fsync(f.fd) != 0) fail("fsync");
    const int fd = f.fd;
    f.fd = -1;
    if (::close(fd) != 0) fail("close");
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) fail("rename");
}

std::string read_file(const std::string& path, std::size_t limit, const char* kind) {
  FileReader r(path);
  auto too_large = [&] {
    return UsageError(fmt::format("{}: larger than {}, the most {} {} file may hold", path,
                                  limit % kFileMiB == 0 ? fmt::format("{} MiB", limit / kFileMiB) : fmt::format("{} bytes", limit),
                                  std::string("aeiou").find(kind[0]) != std::string::npos ? "an" : "a", kind));
  };
  if (r.regular() && r.size() > limit) throw too_large();
  std::string out;
  out.reserve(r.regular() ? r.size() : 0);
  // One byte past the limit tells a file at the limit from a larger (or endless) one.
  while (out.size() <= limit && r.append(out, std::min<std::size_t>(1 << 16, limit + 1 - out.size())) > 0) {
  }
  if (out.size() > limit) throw too_large();
  return out;
}

FileReader::FileReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw UsageError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw UsageError(fmt::format("cannot read {}: {}", path, std::strerror(err)));
  }
  regular_ = S_ISREG(st.st_mode);
  size_ = regular_ ? static_cast<std::size_t>(st.st_size) : 0;
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t FileReader::append(std::string& out, std::size_t n) {
  std::size_t got = 0;
  char buf[1 << 16];
  while (got < n) {
    const ssize_t k = ::read(fd_, buf, std::min(sizeof buf, n - got));
    if (k < 0 && errno == EINTR) continue;
    // e.g. EISDIR for a directory
    if (k < 0) throw UsageError(fmt::format("cannot read {}: {}", path_, std::strerror(errno)));
    if (k == 0) break;
    out.append(buf, static_cast<std::size_t>(k));
    got += static_cast<std::size_t>(k);
  }
  return got;
}

void make_dirs(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("cannot create directory {}: {}", dir, ec.message()));
}

DirLock::DirLock(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  created_ = !std::filesystem::exists(dir, ec);
  make_dirs(dir);
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) throw Error(fmt::format("cannot open directory {}: {}", dir, std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw UsageError(fmt::format("{} is being written by another parbench process; wait for it or choose "
                                   "another --out", dir));
    throw Error(fmt::format("cannot lock directory {}: {}", dir, std::strerror(err)));
  }
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  if (created_) {
    std::error_code ec;
    if (std::filesystem::is_empty(dir_, ec) && !ec) ::rmdir(dir_.c_str());
  }
  ::close(fd_);
}

StagingDir::StagingDir(const std::string& dir) : dir_(dir.empty() ? "." : dir) {
  std::error_code exists_ec;
  created_ = !std::filesystem::exists(dir_, exists_ec);
  make_dirs(dir_);
  staging_ = fmt::format("{}/.staging.{}", dir_, ::getpid());
  std::error_code ec;
  std::filesystem::remove_all(staging_, ec);
  if (::mkdir(staging_.c_str(), 0755) != 0)
    throw Error(fmt::format("cannot write to {}: mkdir {}: {}", dir_, staging_, std::strerror(errno)));
}

StagingDir::~StagingDir() {
  std::error_code ec;
  std::filesystem::remove_all(staging_, ec);
  if (created_ && std::filesystem::is_empty(dir_, ec) && !ec) ::rmdir(dir_.c_str());
}

void StagingDir::commit(const std::vector<std::string>& names) {
  namespace fs = std::filesystem;
  for (const std::string& name : names) {
    const fs::path from = fs::path(staging_) / name, to = fs::path(dir_) / name;
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(to, ec);
    if (fs::is_directory(st) && fs::is_directory(from)) {
      // A folder cannot be renamed over a non-empty one: set the old one aside inside staging.
      const fs::path old = fs::path(staging_) / (name + ".old");
      if (::rename(to.c_str(), old.c_str()) != 0)
        throw Error(fmt::format("cannot replace {}: {}", to.string(), std::strerror(errno)));
    }
    if (::rename(from.c_str(), to.c_str()) != 0)
      throw Error(fmt::format("cannot write {}: rename from {}: {}", to.string(), from.string(), std::strerror(errno)));
  }
}

}  // namespace pb
