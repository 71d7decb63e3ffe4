#include "engine/torch_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

namespace mixserve {

namespace {

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// ---- The zip archive torch.save writes: every entry stored (no compression), zip64 when large.

struct ZipEntry {
  uint64_t offset = 0, size = 0;  // of the data, in the file
};

std::map<std::string, ZipEntry> read_zip(const std::vector<uint8_t>& f,
                                         const std::function<void(const std::string&)>& fail) {
  const size_t n = f.size();
  if (n < 22) fail("too short to be a zip archive (torch.save's format since PyTorch 1.6)");
  size_t eocd = n - 22;  // the end-of-central-directory record, after at most 64 KiB of comment
  const size_t lowest = n > 22 + 65535 ? n - 22 - 65535 : 0;
  while (le(&f[eocd], 4) != 0x06054b50) {
    if (eocd == lowest)
      fail(
          "not a zip archive: a file torch.save wrote before PyTorch 1.6? Load and save it again "
          "with a newer torch");
    --eocd;
  }
  uint64_t count = le(&f[eocd + 10], 2), cd_size = le(&f[eocd + 12], 4), cd = le(&f[eocd + 16], 4);
  if (count == 0xffff || cd_size == 0xffffffff || cd == 0xffffffff) {  // zip64
    if (eocd < 20 || le(&f[eocd - 20], 4) != 0x07064b50) fail("zip64 locator missing");
    const uint64_t rec = le(&f[eocd - 12], 8);
    if (n < 56 || rec > n - 56 || le(&f[rec], 4) != 0x06064b50)
      fail("zip64 end record out of place");
    count = le(&f[rec + 32], 8), cd_size = le(&f[rec + 40], 8), cd = le(&f[rec + 48], 8);
  }
  if (cd > n || cd_size > n - cd) fail("central directory out of the file");
  std::map<std::string, ZipEntry> entries;
  size_t p = cd;
  for (uint64_t i = 0; i < count; ++i) {
    if (p + 46 > cd + cd_size || le(&f[p], 4) != 0x02014b50) fail("central directory entry broken");
    const uint64_t method = le(&f[p + 10], 2), name_len = le(&f[p + 28], 2),
                   extra_len = le(&f[p + 30], 2), comment_len = le(&f[p + 32], 2);
    uint64_t csize = le(&f[p + 20], 4), usize = le(&f[p + 24], 4), local = le(&f[p + 42], 4);
    const size_t next = p + 46 + name_len + extra_len + comment_len;
    if (next > cd + cd_size) fail("central directory entry runs past its end");
    const std::string name(reinterpret_cast<const char*>(&f[p + 46]), name_len);
    for (size_t e = p + 46 + name_len; e + 4 <= p + 46 + name_len + extra_len;) {
      const uint64_t id = le(&f[e], 2), len = le(&f[e + 2], 2);
      if (e + 4 + len > p + 46 + name_len + extra_len) fail("zip extra field broken");
      if (id == 1) {  // zip64: the fields that were 0xffffffff, in this order
        size_t q = e + 4;
        auto take = [&](uint64_t& v) {
          if (v != 0xffffffff) return;
          if (q + 8 > e + 4 + len) fail("zip64 extra field too short");
          v = le(&f[q], 8), q += 8;
        };
        take(usize), take(csize), take(local);
      }
      e += 4 + len;
    }
    if (method != 0) fail(name + ": compressed (torch.save stores entries uncompressed)");
    if (csize != usize) fail(name + ": sizes disagree");
    if (n < 30 || local > n - 30 || le(&f[local], 4) != 0x04034b50)
      fail(name + ": local header out of place");
    const uint64_t data = local + 30 + le(&f[local + 26], 2) + le(&f[local + 28], 2);
    if (data > n || usize > n - data) fail(name + ": data out of the file");
    entries[name] = {data, usize};
    p = next;
  }
  return entries;
}

// ---- The pickle machine: values in an arena (indices, so no ownership cycles), the opcodes of
// protocols 2 to 4 that torch.save emits; nothing the pickle names is ever called.

struct Value {
  enum class Kind : uint8_t {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kBytes,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kObject,
    kStorage,
    kTensor
  };
  explicit Value(Kind k = Kind::kNone) : kind(k) {}
  Kind kind;
  int64_t i = 0;                // int, bool; float: its bits (unused); tensor: its storage's value
  std::string s;                // string, bytes; global "module.name"; storage key
  std::vector<uint32_t> items;  // tuple, list; dict: key, value, key, value, ...
  DType dtype = DType::kF32;    // storage, tensor
  int64_t offset = 0;           // tensor, in elements
  std::vector<int64_t> shape, stride;
};

// Each value is ~100 bytes: 4 Mi of them (a pickle of 200,000 tensors and more) stay well within
// memory, where a crafted file of 64 MiB of one-byte opcodes could otherwise ask for gigabytes.
// The width of the length that precedes a string's or bytes' data, by opcode.
int length_bytes(uint8_t op) {
  switch (op) {
    case 0x8c:
    case 'U':
    case 'C':
      return 1;  // SHORT_*
    case 0x8d:
    case 0x8e:
      return 8;  // *8
    default:
      return 4;
  }
}

constexpr size_t kMaxValues = size_t{1} << 22;

struct Machine {
  const uint8_t* p;
  const uint8_t* end;
  const std::function<void(const std::string&)>& fail;
  std::vector<Value> values;
  std::vector<uint32_t> stack;
  std::vector<size_t> marks;
  std::map<uint64_t, uint32_t> memo;

  uint32_t add(Value v) {
    if (values.size() >= kMaxValues) fail("pickle: too many values");
    values.push_back(std::move(v));
    return static_cast<uint32_t>(values.size() - 1);
  }
  uint32_t add(Value::Kind k) { return add(Value{k}); }
  const uint8_t* take(uint64_t n) {
    if (n > static_cast<uint64_t>(end - p)) fail("pickle: truncated");
    const uint8_t* q = p;
    p += n;
    return q;
  }
  uint64_t take_le(int n) { return le(take(n), n); }
  uint32_t pop() {
    if (stack.size() <= (marks.empty() ? 0 : marks.back())) fail("pickle: stack underflow");
    const uint32_t v = stack.back();
    stack.pop_back();
    return v;
  }
  uint32_t top() {
    if (stack.empty()) fail("pickle: empty stack");
    return stack.back();
  }
  std::vector<uint32_t> pop_mark() {
    if (marks.empty()) fail("pickle: no mark");
    std::vector<uint32_t> items(stack.begin() + marks.back(), stack.end());
    stack.resize(marks.back());
    marks.pop_back();
    return items;
  }
  std::string line() {
    const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(p, '\n', end - p));
    if (!nl) fail("pickle: unterminated line");
    std::string s(reinterpret_cast<const char*>(p), nl - p);
    p = nl + 1;
    return s;
  }
  uint32_t text(Value::Kind k, uint64_t n) {
    Value v{k};
    v.s.assign(reinterpret_cast<const char*>(take(n)), n);
    return add(std::move(v));
  }
  uint32_t integer(int64_t i) {
    Value v{Value::Kind::kInt};
    v.i = i;
    return add(std::move(v));
  }
  uint32_t global(std::string name) {
    Value v{Value::Kind::kGlobal};
    v.s = std::move(name);
    return add(std::move(v));
  }
  uint32_t tuple(std::vector<uint32_t> items) {
    Value v{Value::Kind::kTuple};
    v.items = std::move(items);
    return add(std::move(v));
  }
  int64_t as_int(uint32_t v) {
    if (values[v].kind != Value::Kind::kInt) fail("pickle: an integer expected");
    return values[v].i;
  }
  std::vector<int64_t> ints(uint32_t v) {
    if (values[v].kind != Value::Kind::kTuple) fail("pickle: a tuple of sizes expected");
    std::vector<int64_t> out;
    for (uint32_t e : values[v].items) out.push_back(as_int(e));
    return out;
  }

  // The storage a persistent id names: ('storage', torch.<Type>Storage, key, location, numel).
  uint32_t persistent(uint32_t pid) {
    const Value& t = values[pid];
    if (t.kind != Value::Kind::kTuple || t.items.size() < 5 || values[t.items[0]].s != "storage" ||
        values[t.items[1]].kind != Value::Kind::kGlobal ||
        values[t.items[2]].kind != Value::Kind::kString)
      fail("pickle: a persistent id that is not a storage");
    static const std::map<std::string, DType> types = {
        {"torch.FloatStorage", DType::kF32},     {"torch.HalfStorage", DType::kF16},
        {"torch.BFloat16Storage", DType::kBF16}, {"torch.DoubleStorage", DType::kF64},
        {"torch.LongStorage", DType::kI64},      {"torch.IntStorage", DType::kI32},
        {"torch.ShortStorage", DType::kI16},     {"torch.CharStorage", DType::kI8},
        {"torch.ByteStorage", DType::kU8},       {"torch.BoolStorage", DType::kBool}};
    const auto it = types.find(values[t.items[1]].s);
    if (it == types.end())
      fail("pickle: storage type " + values[t.items[1]].s + " is not supported");
    Value s{Value::Kind::kStorage};
    s.dtype = it->second;
    s.s = values[t.items[2]].s;
    return add(std::move(s));
  }

  // callable(*args), for the few callables that build what a state dict holds; anything else
  // becomes an opaque object.
  uint32_t reduce(uint32_t callable, uint32_t args) {
    const std::string& name = values[callable].s;
    const std::vector<uint32_t> a =
        values[args].kind == Value::Kind::kTuple ? values[args].items : std::vector<uint32_t>{};
    if (values[callable].kind == Value::Kind::kGlobal) {
      if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
        if (a.size() < 4 || values[a[0]].kind != Value::Kind::kStorage)
          fail("pickle: a tensor without its storage");
        Value t{Value::Kind::kTensor};
        t.i = a[0];
        t.dtype = values[a[0]].dtype;
        t.offset = as_int(a[1]);
        t.shape = ints(a[2]);
        t.stride = ints(a[3]);
        if (t.shape.size() != t.stride.size())
          fail("pickle: a tensor's size and stride differ in length");
        return add(std::move(t));
      }
      if (name == "torch._utils._rebuild_parameter" ||
          name == "torch._utils._rebuild_parameter_with_state") {
        if (a.empty() || values[a[0]].kind != Value::Kind::kTensor)
          fail("pickle: a parameter without its tensor");
        return a[0];
      }
      if (name == "collections.OrderedDict" && a.empty()) return add(Value::Kind::kDict);
    }
    Value o{Value::Kind::kObject};
    o.items = {callable, args};
    return add(std::move(o));
  }

  void set_items(uint32_t dict, const std::vector<uint32_t>& kv) {
    if (kv.size() % 2) fail("pickle: odd SETITEMS");
    if (values[dict].kind != Value::Kind::kDict) return;  // an opaque object's items: dropped
    values[dict].items.insert(values[dict].items.end(), kv.begin(), kv.end());
  }
  void append(uint32_t list, const std::vector<uint32_t>& items) {
    if (values[list].kind == Value::Kind::kList)
      values[list].items.insert(values[list].items.end(), items.begin(), items.end());
  }

  uint32_t run() {
    for (;;) {
      const uint8_t op = *take(1);
      switch (op) {
        case 0x80:
          take(1);
          break;  // PROTO
        case 0x95:
          take(8);
          break;  // FRAME
        case '.':
          return pop();  // STOP
        case '(':
          marks.push_back(stack.size());
          break;  // MARK
        case '0':
          pop();
          break;  // POP
        case '1':
          pop_mark();
          break;  // POP_MARK
        case '2':
          stack.push_back(top());
          break;  // DUP
        case 'N':
          stack.push_back(add(Value::Kind::kNone));
          break;
        case 0x88:
        case 0x89: {  // NEWTRUE, NEWFALSE
          Value v{Value::Kind::kBool};
          v.i = op == 0x88;
          stack.push_back(add(std::move(v)));
          break;
        }
        case 'J':
          stack.push_back(integer(static_cast<int32_t>(take_le(4))));
          break;  // BININT
        case 'K':
          stack.push_back(integer(take_le(1)));
          break;  // BININT1
        case 'M':
          stack.push_back(integer(take_le(2)));
          break;  // BININT2
        case 0x8a:
        case 0x8b: {  // LONG1, LONG4
          const uint64_t n = op == 0x8a ? take_le(1) : take_le(4);
          if (n > 8) fail("pickle: an integer beyond 64 bits");
          const uint8_t* b = take(n);
          uint64_t v = n ? le(b, static_cast<int>(n)) : 0;
          if (n && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
          stack.push_back(integer(static_cast<int64_t>(v)));
          break;
        }
        case 'G': {  // BINFLOAT, big-endian
          uint64_t bits = 0;
          const uint8_t* b = take(8);
          for (int i = 0; i < 8; ++i) bits = bits << 8 | b[i];
          Value v{Value::Kind::kFloat};
          std::memcpy(&v.i, &bits, 8);
          stack.push_back(add(std::move(v)));
          break;
        }
        case 'X':
        case 0x8c:
        case 0x8d:  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
          stack.push_back(text(Value::Kind::kString, take_le(length_bytes(op))));
          break;
        case 'T':
        case 'U':
        case 'B':
        case 'C':
        case 0x8e:  // BINSTRING, SHORT_BINSTRING, BINBYTES, SHORT_BINBYTES, BINBYTES8
          stack.push_back(text(Value::Kind::kBytes, take_le(length_bytes(op))));
          break;
        case ')':
          stack.push_back(tuple({}));
          break;  // EMPTY_TUPLE
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          std::vector<uint32_t> items(op - 0x84);
          for (size_t i = items.size(); i-- > 0;) items[i] = pop();
          stack.push_back(tuple(std::move(items)));
          break;
        }
        case 't':
          stack.push_back(tuple(pop_mark()));
          break;  // TUPLE
        case ']':
        case 0x8f:  // EMPTY_LIST, EMPTY_SET (a set as a list)
          stack.push_back(add(Value::Kind::kList));
          break;
        case 'l':
        case 0x91: {  // LIST, FROZENSET
          Value v{Value::Kind::kList};
          v.items = pop_mark();
          stack.push_back(add(std::move(v)));
          break;
        }
        case '}':
          stack.push_back(add(Value::Kind::kDict));
          break;
        case 'd': {  // DICT
          const std::vector<uint32_t> kv = pop_mark();
          const uint32_t d = add(Value::Kind::kDict);
          set_items(d, kv);
          stack.push_back(d);
          break;
        }
        case 'a': {  // APPEND
          const uint32_t v = pop();
          append(top(), {v});
          break;
        }
        case 'e':
        case 0x90: {  // APPENDS, ADDITEMS
          const std::vector<uint32_t> items = pop_mark();
          append(top(), items);
          break;
        }
        case 's': {  // SETITEM
          const uint32_t v = pop(), k = pop();
          set_items(top(), {k, v});
          break;
        }
        case 'u': {  // SETITEMS
          const std::vector<uint32_t> kv = pop_mark();
          set_items(top(), kv);
          break;
        }
        case 'c': {  // GLOBAL module\nname\n
          std::string module = line();
          stack.push_back(global(module + "." + line()));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const uint32_t name = pop(), module = pop();
          stack.push_back(global(values[module].s + "." + values[name].s));
          break;
        }
        case 'R': {  // REDUCE
          const uint32_t args = pop(), callable = pop();
          stack.push_back(reduce(callable, args));
          break;
        }
        case 0x81: {  // NEWOBJ
          const uint32_t args = pop(), cls = pop();
          Value o{Value::Kind::kObject};
          o.items = {cls, args};
          stack.push_back(add(std::move(o)));
          break;
        }
        case 0x92: {  // NEWOBJ_EX
          const uint32_t kwargs = pop(), args = pop(), cls = pop();
          Value o{Value::Kind::kObject};
          o.items = {cls, args, kwargs};
          stack.push_back(add(std::move(o)));
          break;
        }
        case 'b':
          pop();
          break;  // BUILD: an object's state (an OrderedDict's _metadata): dropped
        case 'Q':
          stack.push_back(persistent(pop()));
          break;  // BINPERSID
        case 'q':
          memo[take_le(1)] = top();
          break;  // BINPUT
        case 'r':
          memo[take_le(4)] = top();
          break;  // LONG_BINPUT
        case 0x94:
          memo[memo.size()] = top();
          break;  // MEMOIZE
        case 'h':
        case 'j': {  // BINGET, LONG_BINGET
          const auto it = memo.find(take_le(op == 'h' ? 1 : 4));
          if (it == memo.end()) fail("pickle: a memo entry that was never put");
          stack.push_back(it->second);
          break;
        }
        default:
          fail("pickle: opcode 0x" + std::string(1, "0123456789abcdef"[op >> 4]) +
               "0123456789abcdef"[op & 15] + " is not supported");
      }
    }
  }
};

bool is_dict_of_tensors(const Machine& m, uint32_t v) {
  const Value& d = m.values[v];
  if (d.kind != Value::Kind::kDict || d.items.empty()) return false;
  for (size_t i = 0; i < d.items.size(); i += 2)
    if (m.values[d.items[i]].kind != Value::Kind::kString ||
        m.values[d.items[i + 1]].kind != Value::Kind::kTensor)
      return false;
  return true;
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ModelError(path + ": cannot open");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TorchCheckpoint::TorchCheckpoint(const std::string& path) : path_(path), bytes_(read_all(path)) {
  parse();
}

TorchCheckpoint::TorchCheckpoint(std::vector<uint8_t> bytes, const std::string& path)
    : path_(path), bytes_(std::move(bytes)) {
  parse();
}

void TorchCheckpoint::fail(const std::string& what) const {
  throw ModelError(path_ + ": " + what);
}

void TorchCheckpoint::parse() {
  const std::function<void(const std::string&)> fail = [this](const std::string& w) {
    this->fail(w);
  };
  const std::map<std::string, ZipEntry> zip = read_zip(bytes_, fail);
  // <archive>/data.pkl, and the storages beside it in <archive>/data/<key>
  std::string root;
  for (const auto& [name, e] : zip)
    if (name.size() >= 9 && name.compare(name.size() - 9, 9, "/data.pkl") == 0 &&
        name.find('/') == name.size() - 9)
      root = name.substr(0, name.size() - 8);
  if (root.empty()) fail("no data.pkl: not a file torch.save wrote");
  const ZipEntry& pkl = zip.at(root + "data.pkl");
  Machine m{
      bytes_.data() + pkl.offset, bytes_.data() + pkl.offset + pkl.size, fail, {}, {}, {}, {}};
  const uint32_t top = m.run();
  uint32_t dict = top;
  if (!is_dict_of_tensors(m, top)) {  // a checkpoint with the state dict under a key
    dict = UINT32_MAX;
    const Value& t = m.values[top];
    for (const char* key : {"model", "state_dict", "module", "model_state_dict"})
      for (size_t i = 0; t.kind == Value::Kind::kDict && i < t.items.size() && dict == UINT32_MAX;
           i += 2)
        if (m.values[t.items[i]].s == key && is_dict_of_tensors(m, t.items[i + 1]))
          dict = t.items[i + 1];
    if (dict == UINT32_MAX)
      fail(
          "no dict of tensors, at the top or under \"model\", \"state_dict\", \"module\" or "
          "\"model_state_dict\"");
  }
  const Value& d = m.values[dict];
  size_t gathered_bytes = 0;
  for (size_t i = 0; i < d.items.size(); i += 2) {
    const std::string& name = m.values[d.items[i]].s;
    const Value& t = m.values[d.items[i + 1]];
    const Value& storage = m.values[t.i];
    const auto entry = zip.find(root + "data/" + storage.s);
    if (entry == zip.end()) fail(name + ": its storage " + storage.s + " is not in the archive");
    const size_t elem = dtype_size(t.dtype);
    const uint64_t storage_elems = entry->second.size / elem;
    // Row-major contiguity, the extent in elements and the element count, with overflow checks.
    int64_t numel = 1, last = t.offset, expect = 1;
    int64_t reach = 0;  // (size − 1)·stride of one dimension
    bool contiguous = true;
    if (t.offset < 0) fail(name + ": negative storage offset");
    for (size_t k = t.shape.size(); k-- > 0;) {
      const int64_t size = t.shape[k], stride = t.stride[k];
      if (size < 0 || stride < 0) fail(name + ": negative size or stride");
      if (size == 0) numel = 0;
      if (size > 1 && stride != expect) contiguous = false;
      if (__builtin_mul_overflow(expect, size, &expect) ||
          __builtin_mul_overflow(numel, size == 0 ? 1 : size, &numel) ||
          (size > 0 && (__builtin_mul_overflow(size - 1, stride, &reach) ||
                        __builtin_add_overflow(last, reach, &last))) ||
          numel > (int64_t{1} << 40))
        fail(name + ": too large");
    }
    if (numel > 0 && static_cast<uint64_t>(last) >= storage_elems)
      fail(name + ": runs past its storage (" + std::to_string(storage_elems) + " elements)");
    TensorView v;
    v.name = name;
    v.dtype = t.dtype;
    v.shape = t.shape;
    v.bytes = static_cast<size_t>(numel) * elem;
    const uint8_t* base = bytes_.data() + entry->second.offset;
    if (numel == 0) {
      v.data = base;  // no element: its offset may lie anywhere
    } else if (contiguous) {
      v.data = base + t.offset * elem;
    } else {  // gather the strided view into a buffer of its own
      // A broadcast view (stride 0) or many views of one storage could ask for far more memory
      // than the file holds: the copies together stay within the file's size plus 64 MiB.
      gathered_bytes += v.bytes;
      if (static_cast<uint64_t>(numel) > storage_elems ||
          gathered_bytes > bytes_.size() + (64u << 20))
        fail(name + ": a strided view larger than the file can justify (broadcast strides?)");
      std::vector<uint8_t> out(v.bytes);
      std::vector<int64_t> index(t.shape.size(), 0);
      for (int64_t n = 0; n < numel; ++n) {
        int64_t at = t.offset;
        for (size_t k = 0; k < index.size(); ++k) at += index[k] * t.stride[k];
        std::memcpy(&out[n * elem], base + at * elem, elem);
        for (size_t k = index.size(); k-- > 0;) {
          if (++index[k] < t.shape[k]) break;
          index[k] = 0;
        }
      }
      gathered_.push_back(std::move(out));
      v.data = gathered_.back().data();
    }
    tensors_.push_back(std::move(v));
  }
}

CheckpointFile::CheckpointFile(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(dir + "/model.safetensors")) {
    safetensors_ = std::make_unique<SafetensorsFile>(dir + "/model.safetensors");
    return;
  }
  if (fs::exists(dir + "/pytorch_model.bin")) {
    torch_ = std::make_unique<TorchCheckpoint>(dir + "/pytorch_model.bin");
    return;
  }
  std::vector<std::string> pt;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".pt") pt.push_back(e.path().string());
  if (pt.size() != 1)
    throw ModelError(dir + ": " +
                     (pt.empty() ? "no model.safetensors, pytorch_model.bin or *.pt file"
                                 : "several *.pt files: which one is the model's?"));
  torch_ = std::make_unique<TorchCheckpoint>(pt[0]);
}

const std::string& CheckpointFile::path() const {
  return safetensors_ ? safetensors_->path() : torch_->path();
}

const std::vector<TensorView>& CheckpointFile::tensors() const {
  return safetensors_ ? safetensors_->tensors() : torch_->tensors();
}

}  // namespace mixserve
