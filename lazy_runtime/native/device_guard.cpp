// The lazy device's guard in C++: what torch asks of a device on every autograd node
// (its stream, in InputMetadata) and around every backward call (device and stream
// guards). torch's Python backend registration answers each question by calling a
// Python method (``type_``); this answers with constants, as that guard does: one
// device, index 0, one default stream, no events.
//
// Also the device's hooks (``LazyHooks``): torch takes a named PrivateUse1 backend for the
// process's accelerator, so ``pin_memory()`` and ``DataLoader(pin_memory=True)`` ask it
// for a pinned-memory allocator, which torch's Python hooks cannot give.
//
// Built by ``lazy_runtime/native_guard.py`` against the installed torch's headers and
// registered before torch's Python guard and hooks would be. C ABI entry points only: no
// Python and no pybind11 in here.

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/Stream.h>

namespace {

using c10::Device;
using c10::DeviceType;
using c10::Stream;

constexpr DeviceType kLazy = DeviceType::PrivateUse1;

Device the_device() { return Device(kLazy, 0); }
Stream the_stream() { return Stream(Stream::DEFAULT, the_device()); }

struct LazyDeviceGuard final : public c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return kLazy; }
  Device exchangeDevice(Device) const override { return the_device(); }
  Device getDevice() const override { return the_device(); }
  void setDevice(Device) const override {}
  void uncheckedSetDevice(Device) const noexcept override {}
  Stream getStream(Device) const noexcept override { return the_stream(); }
  Stream getNewStream(Device, int) const override { return the_stream(); }
  Stream exchangeStream(Stream) const noexcept override { return the_stream(); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override {}
};

LazyDeviceGuard guard;

// What torch's Python hooks answer (available, built, a primary context), and pinned
// memory: the lazy device copies host data itself (to JAX, at the next graph), so memory
// "pinned" for it is ordinary host memory, and no pointer is pinned (``is_pinned()`` is
// False, as for a CPU tensor without an accelerator).
struct LazyHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  bool isPinnedPtr(const void*) const override { return false; }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return c10::GetCPUAllocator();
  }
  Device getDeviceFromPtr(void*) const override { return the_device(); }
};

LazyHooks hooks;

}  // namespace

// 1: registered; 0: PrivateUse1 already has a guard (left as it is).
extern "C" int lazy_runtime_register_device_guard() {
  if (c10::impl::hasDeviceGuardImpl(kLazy)) {
    return 0;
  }
  c10::impl::registerDeviceGuard(kLazy, &guard);
  return 1;
}

// 1: registered; 0: PrivateUse1 already has hooks (left as they are).
extern "C" int lazy_runtime_register_hooks() {
  if (at::isPrivateUse1HooksRegistered()) {
    return 0;
  }
  at::RegisterPrivateUse1HooksInterface(&hooks);
  return 1;
}
