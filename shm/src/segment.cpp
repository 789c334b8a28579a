#include "eldr/shm/segment.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "eldr/shm/ring.hpp"

namespace eldr::shm {

namespace bip = boost::interprocess;

std::string segment_name(std::string_view instance) {
  return "/eldr-v" + std::to_string(kFormatMajor) + "-" + std::string(instance);
}

Status validate_instance_name(std::string_view instance) {
  if (instance.empty() || instance.size() > kMaxInstanceName)
    return {Errc::invalid_argument, "instance name must be 1.." + std::to_string(kMaxInstanceName) +
                                        " characters, got " + std::to_string(instance.size())};
  for (char c : instance) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok)
      return {Errc::invalid_argument,
              "instance name \"" + std::string(instance) + "\" may only use [A-Za-z0-9_.-]"};
  }
  if (instance == "." || instance == "..")
    return {Errc::invalid_argument, "instance name may not be \".\" or \"..\""};
  return Status::ok();
}

Status validate_request_id(std::string_view request_id) {
  if (request_id.empty() || request_id.size() > kMaxRequestId)
    return {Errc::invalid_argument, "request id must be 1.." + std::to_string(kMaxRequestId) +
                                        " bytes, got " + std::to_string(request_id.size())};
  if (request_id.find('\0') != std::string_view::npos)
    return {Errc::invalid_argument, "request id contains a NUL byte"};
  return Status::ok();
}

const char* reject_reason_name(RejectReason reason) noexcept {
  switch (reason) {
    case RejectReason::bad_header:
      return "bad_header";
    case RejectReason::bad_checksum:
      return "bad_checksum";
    case RejectReason::bad_payload:
      return "bad_payload";
    case RejectReason::too_large:
      return "too_large";
    case RejectReason::count_:
      break;
  }
  return "unknown";
}

namespace detail {

namespace {

uint64_t clock_ns(clockid_t clock) noexcept {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

}  // namespace

Status errno_status(int err, const std::string& what) {
  Errc code = Errc::io;
  if (err == ENOENT) code = Errc::no_daemon;
  if (err == EACCES || err == EPERM) code = Errc::permission;
  if (err == ENOSPC || err == ENOMEM) code = Errc::out_of_memory;
  return {code, what + ": " + std::strerror(err)};
}

uint64_t monotonic_ns() noexcept { return clock_ns(CLOCK_MONOTONIC); }
uint64_t realtime_ns() noexcept { return clock_ns(CLOCK_REALTIME); }

uint64_t process_start_time(pid_t pid) noexcept {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  // The command name (field 2) may contain spaces and ')': fields resume after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return 0;
  return std::strtoull(field.c_str(), nullptr, 10);
}

uint64_t random_generation() {
  std::random_device rd;
  uint64_t g = 0;
  while (g == 0) g = (uint64_t{rd()} << 32) ^ rd();
  return g;
}

std::string lock_file_path(std::string_view dir, std::string_view instance) {
  std::string path(dir);
  if (path.empty() || path.back() != '/') path += '/';
  return path + "eldr-v" + std::to_string(kFormatMajor) + "-" + std::string(instance) + ".lock";
}

std::string socket_file_path(std::string_view dir, std::string_view instance) {
  std::string path(dir);
  if (path.empty() || path.back() != '/') path += '/';
  return path + "eldr-v" + std::to_string(kFormatMajor) + "-" + std::string(instance) + ".sock";
}

Result<gid_t> lookup_group(const std::string& name) {
  std::vector<char> buffer(16384);
  group g{};
  group* found = nullptr;
  const int rc = ::getgrnam_r(name.c_str(), &g, buffer.data(), buffer.size(), &found);
  if (rc != 0 || found == nullptr)
    return Status{Errc::permission, "group \"" + name + "\" not found" +
                                        (rc != 0 ? std::string(": ") + std::strerror(rc) : "")};
  return found->gr_gid;
}

// ---- Mapping ----------------------------------------------------------------------

struct Mapping::Boost {
  bip::shared_memory_object shm;
  bip::mapped_region region;
};

Mapping::Mapping(std::unique_ptr<Boost> b) : m_boost(std::move(b)) {
  m_base = static_cast<uint8_t*>(m_boost->region.get_address());
  m_size = m_boost->region.get_size();
}
Mapping::~Mapping() = default;

int Mapping::fd() const noexcept { return m_boost->shm.get_mapping_handle().handle; }

bool Mapping::unlinked() const noexcept {
  struct stat st {};
  return ::fstat(fd(), &st) == 0 && st.st_nlink == 0;
}

bool Mapping::remove(const std::string& name) noexcept {
  return bip::shared_memory_object::remove(name.c_str());
}

Result<std::unique_ptr<Mapping>> Mapping::create(const std::string& name, uint64_t size) {
  auto b = std::make_unique<Boost>();
  try {
    b->shm = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write,
                                       bip::permissions(0600));
  } catch (const bip::interprocess_exception& e) {
    return errno_status(e.get_native_error(), "cannot create shared memory " + name);
  }
  const int fd = b->shm.get_mapping_handle().handle;
  // Allocate every page now: a full /dev/shm fails here, not with SIGBUS later.
  if (const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); rc != 0) {
    Status s = errno_status(
        rc, "cannot allocate " + std::to_string(size) + " bytes of shared memory for " + name);
    if (rc == ENOSPC)
      s = {Errc::out_of_memory,
           s.message() +
               " (/dev/shm is full or too small: check `df -h /dev/shm`; in a container "
               "raise --shm-size, or lower ring_bytes / max_clients / decision_slots)"};
    remove(name);
    return s;
  }
  try {
    b->region = bip::mapped_region(b->shm, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    remove(name);
    return errno_status(e.get_native_error(), "cannot map shared memory " + name);
  }
  return std::unique_ptr<Mapping>(new Mapping(std::move(b)));
}

Result<std::unique_ptr<Mapping>> Mapping::open(const std::string& name, bool writable) {
  auto b = std::make_unique<Boost>();
  const auto mode = writable ? bip::read_write : bip::read_only;
  try {
    b->shm = bip::shared_memory_object(bip::open_only, name.c_str(), mode);
  } catch (const bip::interprocess_exception& e) {
    Status s = errno_status(e.get_native_error(), "cannot open shared memory " + name);
    if (s.code() == Errc::no_daemon)
      s = {Errc::no_daemon, "no eldrd segment " + name + " (is the daemon running?)"};
    return s;
  }
  struct stat st {};
  if (::fstat(b->shm.get_mapping_handle().handle, &st) != 0)
    return errno_status(errno, "cannot stat shared memory " + name);
  if (st.st_size < static_cast<off_t>(sizeof(SegmentHeader)))
    return Status{Errc::corrupt, "shared memory " + name + " is " + std::to_string(st.st_size) +
                                     " bytes, shorter than its header (" +
                                     std::to_string(sizeof(SegmentHeader)) + ")"};
  try {
    b->region = bip::mapped_region(b->shm, mode);
  } catch (const bip::interprocess_exception& e) {
    return errno_status(e.get_native_error(), "cannot map shared memory " + name);
  }
  return std::unique_ptr<Mapping>(new Mapping(std::move(b)));
}

// ---- RingMemory -------------------------------------------------------------------

namespace {
constexpr unsigned kRingSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
}

Result<RingMemory> RingMemory::create(uint64_t size, uint32_t ring_bytes) {
  RingMemory r;
  r.m_fd = ::memfd_create("eldr-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (r.m_fd < 0) return errno_status(errno, "cannot create ring memory (memfd_create)");
  if (::ftruncate(r.m_fd, static_cast<off_t>(size)) != 0)
    return errno_status(errno, "cannot size ring memory");
  // Every page now: a full memory cgroup fails the registration, not a later write.
  if (const int rc = ::posix_fallocate(r.m_fd, 0, static_cast<off_t>(size)); rc != 0)
    return errno_status(rc, "cannot allocate " + std::to_string(size) + " bytes of ring memory");
  if (::fcntl(r.m_fd, F_ADD_SEALS, kRingSeals) != 0)
    return errno_status(errno, "cannot seal ring memory");
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, r.m_fd, 0);
  if (p == MAP_FAILED) return errno_status(errno, "cannot map ring memory");
  r.m_view = {static_cast<uint8_t*>(p), size, ring_bytes};
  return r;
}

Result<RingMemory> RingMemory::adopt(int fd, uint64_t size, uint32_t ring_bytes) {
  RingMemory r;
  r.m_fd = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_status(errno, "cannot stat the ring memory");
  if (static_cast<uint64_t>(st.st_size) != size)
    return Status{Errc::corrupt, "ring memory is " + std::to_string(st.st_size) +
                                     " bytes, the welcome says " + std::to_string(size)};
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (static_cast<unsigned>(seals) & kRingSeals) != kRingSeals)
    return Status{Errc::corrupt, "ring memory is not sealed against resizing"};
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errno_status(errno, "cannot map the ring memory");
  r.m_view = {static_cast<uint8_t*>(p), size, ring_bytes};
  r.close_fd();
  return r;
}

RingMemory::~RingMemory() { release(); }

RingMemory::RingMemory(RingMemory&& other) noexcept : m_view(other.m_view), m_fd(other.m_fd) {
  other.m_view = {};
  other.m_fd = -1;
}

RingMemory& RingMemory::operator=(RingMemory&& other) noexcept {
  if (this != &other) {
    release();
    m_view = other.m_view;
    m_fd = other.m_fd;
    other.m_view = {};
    other.m_fd = -1;
  }
  return *this;
}

void RingMemory::close_fd() noexcept {
  if (m_fd >= 0) ::close(m_fd);
  m_fd = -1;
}

void RingMemory::release() noexcept {
  if (m_view.base != nullptr) ::munmap(m_view.base, m_view.size);
  m_view = {};
  close_fd();
}

// ---- LockFile ---------------------------------------------------------------------

Result<LockFile> LockFile::open(const std::string& path, bool create, uint32_t mode,
                                std::optional<gid_t> group) {
  const int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
  LockFile f;
  f.m_fd = ::open(path.c_str(), flags, 0600);
  if (f.m_fd < 0) {
    const int err = errno;
    Status s = errno_status(err, "cannot open lock file " + path);
    if (err == ENOENT) s = {Errc::no_daemon, "no lock file " + path + " (is eldrd running?)"};
    return s;
  }
  if (create) {
    struct stat st {};
    // Only the file's owner may (and needs to) set its mode and group.
    if (::fstat(f.m_fd, &st) == 0 && st.st_uid == ::geteuid()) {
      if (::fchmod(f.m_fd, mode) != 0) return errno_status(errno, "cannot chmod lock file " + path);
      if (group && ::fchown(f.m_fd, static_cast<uid_t>(-1), *group) != 0)
        return Status{Errc::permission, "cannot give lock file " + path + " to group " +
                                            std::to_string(*group) + ": " + std::strerror(errno)};
    }
  }
  return f;
}

LockFile::~LockFile() { close(); }

LockFile::LockFile(LockFile&& other) noexcept : m_fd(other.m_fd) { other.m_fd = -1; }

LockFile& LockFile::operator=(LockFile&& other) noexcept {
  if (this != &other) {
    close();
    m_fd = other.m_fd;
    other.m_fd = -1;
  }
  return *this;
}

void LockFile::close() {
  if (m_fd >= 0) ::close(m_fd);  // releases every OFD lock of this description
  m_fd = -1;
}

namespace {
struct flock byte_lock(short type, uint64_t byte) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(byte);
  fl.l_len = 1;
  fl.l_pid = 0;  // required by OFD locks
  return fl;
}
}  // namespace

bool LockFile::try_lock(uint64_t byte) {
  struct flock fl = byte_lock(F_WRLCK, byte);
  return ::fcntl(m_fd, F_OFD_SETLK, &fl) == 0;
}

bool LockFile::still_at(const std::string& path) const {
  struct stat mine {
  }, named{};
  if (::fstat(m_fd, &mine) != 0 || ::stat(path.c_str(), &named) != 0) return false;
  return mine.st_dev == named.st_dev && mine.st_ino == named.st_ino && mine.st_nlink > 0;
}

// ---- header checks --------------------------------------------------------------

const char* state_name(uint32_t state) noexcept {
  switch (static_cast<SegmentState>(state)) {
    case SegmentState::creating:
      return "creating";
    case SegmentState::ready:
      return "ready";
    case SegmentState::draining:
      return "draining";
  }
  return "unknown";
}

Status check_header(const uint8_t* base, uint64_t file_size, bool& not_ready) {
  not_ready = false;
  if (file_size < sizeof(SegmentHeader))
    return {Errc::corrupt,
            "segment of " + std::to_string(file_size) + " bytes is shorter than its header"};
  const auto* h = reinterpret_cast<const SegmentHeader*>(base);
  char magic[8];
  std::memcpy(magic, h->magic, sizeof(magic));
  static constexpr char kZero[8] = {};
  if (std::memcmp(magic, kZero, sizeof(magic)) == 0) {
    not_ready = true;  // the creator has not written its identity yet
    return Status::ok();
  }
  if (std::memcmp(magic, kMagic, sizeof(magic)) != 0)
    return {Errc::incompatible, "not an eldr segment (bad magic)"};
  if (h->format_major != kFormatMajor)
    return {Errc::incompatible, "segment format major version " + std::to_string(h->format_major) +
                                    ", this build reads version " + std::to_string(kFormatMajor)};
  if (h->header_size != sizeof(SegmentHeader) || h->layout_hash != kLayoutHash)
    return {Errc::incompatible,
            "segment layout hash differs from this build's (both format version " +
                std::to_string(kFormatMajor) +
                ", different struct layout: rebuild the client against the daemon's eldr)"};
  if (!valid_ring_capacity(h->ring_bytes) || h->max_clients == 0 ||
      h->max_clients > kMaxClientsLimit || h->decision_slots < kMinDecisionSlots ||
      h->decision_slots > kMaxDecisionSlots || (h->decision_slots & (h->decision_slots - 1)) != 0 ||
      h->max_workers == 0 || h->max_workers > kMaxWorkersLimit)
    return {Errc::corrupt, "segment header carries impossible capacities"};
  const Layout l = compute_layout(h->max_clients, h->ring_bytes, h->decision_slots, h->max_workers);
  if (h->segment_size != l.segment_size || h->clients_offset != l.clients_offset ||
      h->ring_size != l.ring_size || h->decisions_offset != l.decisions_offset ||
      h->workers_offset != l.workers_offset || h->pool_status_offset != l.pool_status_offset)
    return {Errc::corrupt, "segment header offsets disagree with its capacities"};
  if (file_size < l.segment_size)
    return {Errc::corrupt, "segment file is " + std::to_string(file_size) +
                               " bytes, its header says " + std::to_string(l.segment_size) +
                               " (short file)"};
  return Status::ok();
}

SegmentView make_view(uint8_t* base) {
  SegmentView v;
  v.base = base;
  v.header = reinterpret_cast<SegmentHeader*>(base);
  v.max_clients = v.header->max_clients;
  v.ring_bytes = v.header->ring_bytes;
  v.decision_slots = v.header->decision_slots;
  v.max_workers = v.header->max_workers;
  v.layout = compute_layout(v.max_clients, v.ring_bytes, v.decision_slots, v.max_workers);
  return v;
}

}  // namespace detail
}  // namespace eldr::shm
