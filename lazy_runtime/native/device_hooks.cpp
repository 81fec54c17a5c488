// The lazy device's hooks in C++. torch takes a named PrivateUse1 backend for the
// process's accelerator, so ``pin_memory()`` and ``DataLoader(pin_memory=True)`` ask its
// hooks for a pinned-memory allocator, which torch's Python hooks cannot give
// (NotImplementedError). These answer what torch's Python hooks answer (available,
// built, a primary context) and give host memory for pinning: the lazy device copies
// host data itself (to JAX, with the next graph), so no pointer is pinned
// (``is_pinned()`` is False, as for a CPU tensor without an accelerator).
//
// Built by ``lazy_runtime/native_guard.py`` against the installed torch's headers (a
// library of its own, apart from the guard's: the guard does not depend on this API) and
// registered before torch's Python hooks would be. C ABI entry point only.

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

namespace {

struct LazyHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  bool isPinnedPtr(const void*) const override { return false; }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return c10::GetCPUAllocator();
  }
  c10::Device getDeviceFromPtr(void*) const override {
    return c10::Device(c10::DeviceType::PrivateUse1, 0);
  }
};

LazyHooks hooks;

}  // namespace

// 1: registered; 0: PrivateUse1 already has hooks (left as they are).
extern "C" int lazy_runtime_register_hooks() {
  if (at::isPrivateUse1HooksRegistered()) {
    return 0;
  }
  at::RegisterPrivateUse1HooksInterface(&hooks);
  return 1;
}
