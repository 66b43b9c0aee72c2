//===- Vjp.h - reverse-mode rules of the mt primitives ----------*- C++ -*-===//
#ifndef MT_PASSES_VJP_H
#define MT_PASSES_VJP_H

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace mt {

/// Accumulates gradients of values while walking ops in reverse, emitting
/// each primitive's VJP at the builder's insertion point. A value that fans
/// out gets the sum (mt.add) of its users' contributions.
class GradientBuilder {
public:
  explicit GradientBuilder(mlir::OpBuilder &b) : b_(b) {}

  void addGradient(mlir::Value primal, mlir::Value grad);
  /// The gradient accumulated for v so far, or null.
  mlir::Value gradientOf(mlir::Value v) const { return grads_.lookup(v); }
  /// Emits op's VJP if any of its results has a gradient; fails (with a
  /// diagnostic on op) when op has no rule.
  mlir::LogicalResult backprop(mlir::Operation *op);

private:
  mlir::Operation *create(mlir::Location loc, llvm::StringRef name,
                          mlir::ValueRange operands, mlir::TypeRange results,
                          llvm::ArrayRef<mlir::NamedAttribute> attrs = {});
  /// dy summed to `primal`'s shape (the VJP of NumPy broadcasting).
  mlir::Value sumTo(mlir::Value dy, mlir::Value primal);

  mlir::OpBuilder &b_;
  llvm::DenseMap<mlir::Value, mlir::Value> grads_;
};

/// Erases the ops of a backward body that nothing reads: the recomputed
/// forward values its gradients did not need.
void eraseUnread(mlir::Block &body);

} // namespace mt

#endif // MT_PASSES_VJP_H
