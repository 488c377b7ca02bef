// The reference backend: naive, obviously-correct loops for every op of the catalogue, forward and
// backward, in f32 and bf16 (bf16 operands are widened to f32, computed in f32 or double, and the result
// rounded to bf16 once, on store). It is the correctness oracle (DESIGN practice 4) every other backend
// is tested against, and a device a plan can name: "reference". Single-threaded, measured, slow.
#pragma once

#include "backend/backend.hpp"

namespace joule {

class ReferenceBackend : public Backend {
public:
    explicit ReferenceBackend(std::string device = "reference") : device_(std::move(device)) {}
    const std::string& device() const override { return device_; }
    Support supports(const Graph& g, NodeId n) const override;
    std::unique_ptr<Kernel> prepare(const Graph& g, NodeId n, const std::vector<void*>& inputs,
                                    const std::vector<void*>& outputs) override;
    int threads() const override { return 1; }

private:
    std::string device_;
};

}  // namespace joule
