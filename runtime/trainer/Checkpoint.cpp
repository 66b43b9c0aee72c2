//===- Checkpoint.cpp - save and resume the optimizer state ---------------===//

#include "runtime/trainer/Checkpoint.h"

#include "runtime/exec/Error.h"
#include "runtime/exec/HostStore.h"
#include "runtime/trainer/AtomicFile.h"
#include "runtime/trainer/Json.h"
#include "runtime/trainer/Safetensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace mtrt {

namespace {

constexpr const char *kFormat = "megatrain-checkpoint";
constexpr int kVersion = 1;
constexpr const char *kState = "state.safetensors";
constexpr const char *kManifest = "manifest.json";

std::vector<int64_t> shape_of(const ParamDesc &d) {
  return std::vector<int64_t>(d.shape, d.shape + d.rank);
}

void make_directory(const std::string &dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    fail("cannot create directory ", dir, " (", std::strerror(errno), ")");
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail("cannot create directory ", dir, " (a file is in the way)");
}

/// Removes a checkpoint directory: its files, then itself. Only files this
/// module writes live there; anything else makes rmdir fail harmlessly.
void remove_checkpoint_dir(const std::string &dir) {
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..")
        ::unlink((dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' ||
                        s.back() == '\r' || s.back() == '\t'))
    s.pop_back();
  return s;
}

std::string manifest_json(const CheckpointManifest &m, int64_t state_bytes,
                          uint64_t state_hash) {
  std::string j = "{\n";
  j += "  \"format\": " + json_quote(kFormat) + ",\n";
  j += "  \"version\": " + std::to_string(kVersion) + ",\n";
  j += "  \"model\": " + json_quote(m.model) + ",\n";
  j += "  \"plan_hash\": " + json_quote(m.plan_hash) + ",\n";
  j += "  \"step\": " + std::to_string(m.step) + ",\n";
  j += "  \"optimizer_steps\": " + std::to_string(m.optimizer_steps) + ",\n";
  j += "  \"data_position\": " + std::to_string(m.data_position) + ",\n";
  j += "  \"rng\": {\"seed\": " + std::to_string(m.seed) + "},\n";
  j += "  \"flags\": {";
  bool first = true;
  for (const auto &kv : m.flags) {
    j += std::string(first ? "" : ",") + "\n    " + json_quote(kv.first) +
         ": " + json_quote(kv.second);
    first = false;
  }
  j += "\n  },\n";
  j += "  \"state\": {\"file\": " + json_quote(kState) +
       ", \"bytes\": " + std::to_string(state_bytes) +
       ", \"checksum\": " + json_quote(Checksum::hex(state_hash)) + "}\n";
  j += "}\n";
  return j;
}

int64_t file_size(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return -1;
  return st.st_size;
}

} // namespace

std::string save_checkpoint(const std::string &dir, const HostStore &store,
                            const CheckpointManifest &manifest,
                            const CheckpointHook &hook) {
  if (store.any_pending())
    fail("internal: checkpoint of a store with a pending optimizer step");
  make_directory(dir);
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld",
                static_cast<long long>(manifest.step));
  const std::string final_dir = dir + "/" + name;
  const std::string temp_dir = dir + "/." + name + ".tmp";
  remove_checkpoint_dir(temp_dir); // a crashed earlier attempt
  make_directory(temp_dir);

  const Program &p = store.program();
  SafetensorsWriter writer;
  for (int q = 0; q < p.num_params; ++q) {
    if (!store.trainable(q))
      continue;
    const std::string n = p.params[q].name;
    if (store.bf16_master())
      writer.add_bf16("master/" + n, shape_of(p.params[q]),
                      store.values_bf16(q));
    else
      writer.add("master/" + n, shape_of(p.params[q]), store.values(q));
    writer.add("adam_m/" + n, shape_of(p.params[q]), store.adam_m(q));
    writer.add("adam_v/" + n, shape_of(p.params[q]), store.adam_v(q));
  }
  writer.set_metadata("format", kFormat);
  writer.set_metadata("plan_hash", manifest.plan_hash);
  const std::string state_path = temp_dir + "/" + kState;
  uint64_t hash = writer.write(state_path);
  {
    AtomicFile f(temp_dir + "/" + kManifest);
    f.write(manifest_json(manifest, file_size(state_path), hash));
    f.commit();
  }
  sync_directory(temp_dir);
  if (hook)
    hook("before_rename");

  // A leftover of the same step (an earlier run) is moved aside, not
  // deleted, until the new one is in place.
  const std::string aside = dir + "/." + name + ".old";
  if (file_exists(final_dir)) {
    remove_checkpoint_dir(aside);
    if (::rename(final_dir.c_str(), aside.c_str()) != 0)
      fail("cannot move the old ", final_dir, " aside (", std::strerror(errno),
           ")");
  }
  if (::rename(temp_dir.c_str(), final_dir.c_str()) != 0)
    fail("cannot rename ", temp_dir, " to ", final_dir, " (",
         std::strerror(errno), ")");
  sync_directory(dir);
  if (hook)
    hook("before_latest");

  const std::string latest = dir + "/latest";
  {
    AtomicFile f(latest);
    f.write(std::string(name) + "\n");
    f.commit();
  }
  // Only now that the new one is complete and named by latest: drop the
  // previous checkpoint and whatever a killed earlier save left behind.
  std::vector<std::string> stale;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string entry = e->d_name;
      bool old_step = entry.rfind("step-", 0) == 0 && entry != name;
      bool leftover = entry.rfind(".step-", 0) == 0 &&
                      (entry.size() > 4 &&
                       (entry.compare(entry.size() - 4, 4, ".tmp") == 0 ||
                        entry.compare(entry.size() - 4, 4, ".old") == 0));
      if (old_step || leftover)
        stale.push_back(dir + "/" + entry);
    }
    ::closedir(d);
  }
  for (const std::string &path : stale)
    remove_checkpoint_dir(path);
  return final_dir;
}

std::string resolve_checkpoint(const std::string &dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail("--resume ", dir, ": no such checkpoint directory");
  if (file_exists(dir + "/" + kManifest))
    return dir;
  const std::string latest = dir + "/latest";
  if (!file_exists(latest))
    fail("--resume ", dir, ": no checkpoint there (", latest, " is missing)");
  std::string name = trim(read_whole_file(latest));
  if (name.empty() || name.find('/') != std::string::npos)
    fail("corrupt checkpoint pointer '", name, "' (", latest, ")");
  const std::string ckpt = dir + "/" + name;
  if (!file_exists(ckpt + "/" + kManifest))
    fail("checkpoint ", ckpt, " named by ", latest, " is missing (", ckpt, "/",
         kManifest, ")");
  return ckpt;
}

CheckpointManifest load_checkpoint(const std::string &dir, HostStore &store,
                                   bool other_plan) {
  const std::string ckpt = resolve_checkpoint(dir);
  const std::string manifest_path = ckpt + "/" + kManifest;
  const std::string state_path = ckpt + "/" + kState;
  const Program &p = store.program();

  CheckpointManifest m;
  int64_t state_bytes = 0;
  std::string state_hash;
  try {
    JsonValue j = parse_json(read_whole_file(manifest_path));
    auto get = [&](const char *key) -> const JsonValue & {
      const JsonValue *v = j.find(key);
      if (!v)
        throw std::runtime_error(std::string("no \"") + key + "\" field");
      return *v;
    };
    if (get("format").as_string() != kFormat)
      throw std::runtime_error("not a megatrain checkpoint");
    if (get("version").as_int() != kVersion)
      throw std::runtime_error("version " + get("version").text +
                               " (this trainer reads version 1)");
    m.model = get("model").as_string();
    m.plan_hash = get("plan_hash").as_string();
    m.step = get("step").as_int();
    m.optimizer_steps = get("optimizer_steps").as_int();
    m.data_position = get("data_position").as_int();
    const JsonValue *seed = get("rng").find("seed");
    m.seed = seed ? uint64_t(seed->as_int()) : 0;
    for (const auto &kv : get("flags").members)
      m.flags[kv.first] = kv.second.as_string();
    const JsonValue &state = get("state");
    const JsonValue *bytes = state.find("bytes");
    const JsonValue *hash = state.find("checksum");
    if (!bytes || !hash)
      throw std::runtime_error("state has no bytes or checksum");
    state_bytes = bytes->as_int();
    state_hash = hash->as_string();
    if (m.step < 0 || m.optimizer_steps < 0)
      throw std::runtime_error("negative step");
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    fail("corrupt checkpoint manifest: ", e.what(), " (", manifest_path, ")");
  }
  if (m.plan_hash != p.plan_hash && !other_plan)
    fail("checkpoint is from another plan (plan_hash ", m.plan_hash,
         ", this trainer's is ", p.plan_hash,
         "): resume it with the trainer "
         "that wrote it, or pass --resume-other-plan to carry its weights and "
         "optimizer state into this plan (",
         manifest_path, ")");
  if (!file_exists(state_path))
    fail("checkpoint state is missing (", state_path, ")");
  if (file_size(state_path) != state_bytes)
    fail("checkpoint state has ", file_size(state_path),
         " bytes, the manifest says ", state_bytes, " (", state_path,
         " truncated or replaced)");

  std::unordered_map<std::string, int> by_name;
  for (int q = 0; q < p.num_params; ++q)
    by_name.emplace(p.params[q].name, q);
  SafetensorsReader reader(state_path);
  std::vector<char> seen(size_t(p.num_params) * 3, 0);
  Checksum sum;
  for (const TensorInfo &t : reader.tensors()) {
    size_t slash = t.name.find('/');
    std::string kind = t.name.substr(0, slash == std::string::npos ? 0 : slash);
    std::string pname =
        slash == std::string::npos ? "" : t.name.substr(slash + 1);
    int which = kind == "master"   ? 0
                : kind == "adam_m" ? 1
                : kind == "adam_v" ? 2
                                   : -1;
    auto found = by_name.find(pname);
    int q = which >= 0 && found != by_name.end() ? found->second : -1;
    if (q < 0 || !store.trainable(q))
      fail("checkpoint has tensor '", t.name,
           "', which is no trainable param of this plan (", state_path, ")");
    if (which == 0 && store.bf16_master())
      reader.read_bf16(t.name, shape_of(p.params[q]), store.values_bf16(q),
                       &sum);
    else
      reader.read_f32(t.name, shape_of(p.params[q]),
                      which == 0   ? store.values(q)
                      : which == 1 ? store.adam_m(q)
                                   : store.adam_v(q),
                      &sum);
    seen[size_t(q) * 3 + size_t(which)] = 1;
  }
  for (int q = 0; q < p.num_params; ++q)
    for (int which = 0; which < 3 && store.trainable(q); ++which)
      if (!seen[size_t(q) * 3 + size_t(which)])
        fail("checkpoint lacks ",
             which == 0   ? "master/"
             : which == 1 ? "adam_m/"
                          : "adam_v/",
             p.params[q].name, " (", state_path, ")");
  if (Checksum::hex(sum.digest()) != state_hash)
    fail("checkpoint state is corrupt: checksum ", Checksum::hex(sum.digest()),
         ", the manifest says ", state_hash, " (", state_path, ")");
  store.zero_grads();
  return m;
}

} // namespace mtrt
