// The lazy device's guard in C++: what torch asks of a device on every autograd node
// (its stream, in InputMetadata) and around every backward call (device and stream
// guards). torch's Python backend registration answers each question by calling a
// Python method (``type_``); this answers with constants, as that guard does: one
// device, index 0, one default stream, no events.
//
// Built by ``lazy_runtime/native_guard.py`` against the installed torch's headers and
// registered before torch's Python guard would be. C ABI entry point only: no Python
// and no pybind11 in here.

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

}  // namespace

// 1: registered; 0: PrivateUse1 already has a guard (left as it is).
extern "C" int lazy_runtime_register_device_guard() {
  if (c10::impl::hasDeviceGuardImpl(kLazy)) {
    return 0;
  }
  c10::impl::registerDeviceGuard(kLazy, &guard);
  return 1;
}
