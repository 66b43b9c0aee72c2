//===- StructureOps.cpp - params, templates, the model, applications ------===//
//
// Custom syntax and verifiers of the model-level ops. Templates and the model
// print their arguments inline, like func.func, with the weights of a
// template listed apart after `params`.
//
//===----------------------------------------------------------------------===//
#include "ir/MtOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mt;

namespace {

ParseResult parseArgs(OpAsmParser &parser,
                      SmallVectorImpl<OpAsmParser::Argument> &args) {
  return parser.parseArgumentList(args, OpAsmParser::Delimiter::Paren,
                                  /*allowType=*/true);
}

ParseResult parseResultTypes(OpAsmParser &parser,
                             SmallVectorImpl<Type> &types) {
  if (parser.parseArrow())
    return failure();
  return parser.parseCommaSeparatedList(
      OpAsmParser::Delimiter::Paren,
      [&]() { return parser.parseType(types.emplace_back()); });
}

void printArgs(OpAsmPrinter &p, Block::BlockArgListType args) {
  p << "(";
  llvm::interleaveComma(args, p, [&](BlockArgument arg) {
    p.printRegionArgument(arg);
  });
  p << ")";
}

void printResultTypes(OpAsmPrinter &p, TypeRange types) {
  p << " -> (";
  llvm::interleaveComma(types, p);
  p << ")";
}

LogicalResult verifyBlockSignature(Operation *op, Block &block,
                                   FunctionType type) {
  if (block.getNumArguments() != type.getNumInputs())
    return op->emitOpError("has ")
           << block.getNumArguments() << " block arguments but its type has "
           << type.getNumInputs() << " inputs";
  for (auto [i, arg, t] :
       llvm::enumerate(block.getArguments(), type.getInputs()))
    if (arg.getType() != t)
      return op->emitOpError("block argument #")
             << i << " has type " << arg.getType() << ", expected " << t;
  return success();
}

LogicalResult verifyResults(Operation *terminator, ValueRange results,
                            TypeRange expected) {
  if (results.size() != expected.size())
    return terminator->emitOpError("returns ")
           << results.size() << " values, expected " << expected.size();
  for (auto [i, v, t] : llvm::enumerate(results, expected))
    if (v.getType() != t)
      return terminator->emitOpError("result #")
             << i << " has type " << v.getType() << ", expected " << t;
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// ParamOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  if (getTie() && getFrozen())
    return emitOpError("a frozen param cannot be tied");
  if (getTransposed() && !getTie())
    return emitOpError("'transposed' needs a tie");
  if (getTransposed() && getTensorType().getRank() != 2)
    return emitOpError("only a 2-d param can be tied transposed");
  return success();
}

//===----------------------------------------------------------------------===//
// TemplateOp
//===----------------------------------------------------------------------===//

static const char *const kTemplateKinds[] = {"embedding", "layer", "head",
                                             "graph"};

ParseResult TemplateOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  if (parser.parseSymbolName(name, getSymNameAttrName(result.name),
                             result.attributes))
    return failure();
  std::string kind;
  if (parser.parseKeyword("kind") || parser.parseString(&kind))
    return failure();
  SmallVector<OpAsmParser::Argument> args, params;
  if (parseArgs(parser, args))
    return failure();
  if (succeeded(parser.parseOptionalKeyword("params")) &&
      parseArgs(parser, params))
    return failure();
  SmallVector<Type> resultTypes;
  if (parseResultTypes(parser, resultTypes) ||
      parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();

  Builder &b = parser.getBuilder();
  int64_t numInputs = args.size();
  args.append(params.begin(), params.end());
  SmallVector<Type> inputTypes;
  for (auto &arg : args)
    inputTypes.push_back(arg.type);
  result.addAttribute(getKindAttrName(result.name), b.getStringAttr(kind));
  result.addAttribute(getFunctionTypeAttrName(result.name),
                      TypeAttr::get(b.getFunctionType(inputTypes, resultTypes)));
  result.addAttribute(getNumInputsAttrName(result.name),
                      b.getI64IntegerAttr(numInputs));
  return parser.parseRegion(*result.addRegion(), args);
}

void TemplateOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printSymbolName(getSymName());
  p << " kind \"" << getKind() << "\" ";
  auto all = getBlock().getArguments();
  printArgs(p, all.take_front(getNumInputs()));
  if (getNumParams() > 0) {
    p << " params ";
    printArgs(p, all.drop_front(getNumInputs()));
  }
  printResultTypes(p, getFunctionType().getResults());
  p.printOptionalAttrDictWithKeyword(
      (*this)->getAttrs(), {getSymNameAttrName(), getKindAttrName(),
                            getFunctionTypeAttrName(), getNumInputsAttrName()});
  p << ' ';
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false);
}

LogicalResult TemplateOp::verify() {
  if (!llvm::is_contained(kTemplateKinds, getKind()))
    return emitOpError("kind must be embedding, layer, head or graph, not '")
           << getKind() << "'";
  int64_t numInputs = getNumInputs();
  if (numInputs < 0 ||
      numInputs > static_cast<int64_t>(getFunctionType().getNumInputs()))
    return emitOpError("num_inputs ") << numInputs << " is out of range";
  if (getBody().empty())
    return emitOpError("needs a body");
  if (std::optional<int64_t> chunk = getRowChunk(); chunk && *chunk < 1)
    return emitOpError("row_chunk must be positive, not ") << *chunk;
  if (std::optional<ArrayRef<int64_t>> ops = getRowOps()) {
    int64_t n = static_cast<int64_t>(getBlock().getOperations().size());
    if (!getRowChunk())
      return emitOpError("row_ops needs a row_chunk");
    if (ops->size() != 2 || (*ops)[0] < 0 || (*ops)[0] >= (*ops)[1] ||
        (*ops)[1] > n)
      return emitOpError("row_ops must be [begin, end) within the body's ")
             << n << " ops";
  }
  return verifyBlockSignature(*this, getBlock(), getFunctionType());
}

LogicalResult YieldOp::verify() {
  auto tmpl = (*this)->getParentOfType<TemplateOp>();
  return verifyResults(*this, getResults(),
                       tmpl.getFunctionType().getResults());
}

//===----------------------------------------------------------------------===//
// ModelOp
//===----------------------------------------------------------------------===//

ParseResult ModelOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  if (parser.parseSymbolName(name, getSymNameAttrName(result.name),
                             result.attributes))
    return failure();
  SmallVector<OpAsmParser::Argument> args;
  SmallVector<Type> resultTypes;
  if (parseArgs(parser, args) || parseResultTypes(parser, resultTypes) ||
      parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  SmallVector<Type> inputTypes;
  for (auto &arg : args)
    inputTypes.push_back(arg.type);
  result.addAttribute(
      getFunctionTypeAttrName(result.name),
      TypeAttr::get(
          parser.getBuilder().getFunctionType(inputTypes, resultTypes)));
  return parser.parseRegion(*result.addRegion(), args);
}

void ModelOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printSymbolName(getSymName());
  printArgs(p, getBlock().getArguments());
  printResultTypes(p, getFunctionType().getResults());
  p.printOptionalAttrDictWithKeyword(
      (*this)->getAttrs(), {getSymNameAttrName(), getFunctionTypeAttrName()});
  p << ' ';
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false);
}

LogicalResult ModelOp::verify() {
  if (getBody().empty())
    return emitOpError("needs a body");
  if (failed(verifyBlockSignature(*this, getBlock(), getFunctionType())))
    return failure();
  for (Operation &op : getBlock()) {
    if (!isa<ApplyOp, CrossEntropyOp, ReturnOp>(op))
      return op.emitOpError("is not allowed in a model body (only mt.apply, "
                            "mt.cross_entropy and mt.return are)");
  }
  auto ret = dyn_cast<ReturnOp>(getBlock().getTerminator());
  if (!ret)
    return emitOpError("body must end in mt.return");
  return verifyResults(ret, ret.getResults(), getFunctionType().getResults());
}

//===----------------------------------------------------------------------===//
// ApplyOp
//===----------------------------------------------------------------------===//

ParseResult mt::parseSymbolList(OpAsmParser &parser, ArrayAttr &symbols) {
  SmallVector<Attribute> refs;
  if (parser.parseCommaSeparatedList(
          OpAsmParser::Delimiter::Paren, [&]() -> ParseResult {
            FlatSymbolRefAttr ref;
            if (parser.parseAttribute(ref))
              return failure();
            refs.push_back(ref);
            return success();
          }))
    return failure();
  symbols = parser.getBuilder().getArrayAttr(refs);
  return success();
}

void mt::printSymbolList(OpAsmPrinter &p, Operation *, ArrayAttr symbols) {
  p << "(";
  llvm::interleaveComma(symbols, p, [&](Attribute a) { p.printAttribute(a); });
  p << ")";
}

//===----------------------------------------------------------------------===//
// ApplyOp verifier
//===----------------------------------------------------------------------===//

LogicalResult ApplyOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto tmpl = symbols.lookupNearestSymbolFrom<TemplateOp>(*this, getCalleeAttr());
  if (!tmpl)
    return emitOpError("'") << getCallee() << "' is not an mt.template";
  FunctionType type = tmpl.getFunctionType();
  int64_t numInputs = tmpl.getNumInputs();
  if (static_cast<int64_t>(getInputs().size()) != numInputs)
    return emitOpError("passes ") << getInputs().size() << " inputs to @"
                                  << getCallee() << ", which takes "
                                  << numInputs;
  for (auto [i, v] : llvm::enumerate(getInputs()))
    if (v.getType() != type.getInput(i))
      return emitOpError("input #") << i << " has type " << v.getType()
                                    << ", template expects " << type.getInput(i);
  if (getParams().size() != tmpl.getNumParams())
    return emitOpError("binds ") << getParams().size() << " params, @"
                                 << getCallee() << " takes "
                                 << tmpl.getNumParams();
  for (auto [i, sym] : llvm::enumerate(getParams())) {
    auto ref = cast<FlatSymbolRefAttr>(sym);
    auto param = symbols.lookupNearestSymbolFrom<ParamOp>(*this, ref);
    if (!param)
      return emitOpError("param #") << i << " " << ref << " is not an mt.param";
    Type expected = type.getInput(numInputs + i);
    if (param.getType() != expected)
      return emitOpError("param ") << ref << " has type " << param.getType()
                                   << ", template expects " << expected;
  }
  return verifyResults(*this, getResults(), type.getResults());
}
