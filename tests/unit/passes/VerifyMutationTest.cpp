//===- VerifyMutationTest.cpp - every event of a schedule is needed -------===//
//
// Compiles a small model (micro-batches 2) through the pipeline, then for
// every mt.wait and mt.record of its schedule makes two mutants and checks
// that mt-verify-schedule rejects each:
//   removed  the command is deleted;
//   moved    a wait goes right after the next command its stream runs (so
//            that command no longer waits); a record goes right before the
//            previous command its stream runs (so the event no longer
//            covers it).
// "A command its stream runs" skips the other waits and records of the
// stream: swapping two adjacent waits (or two adjacent records) of one
// stream orders nothing differently, so such a mutant proves nothing.
//
//===----------------------------------------------------------------------===//
#include "tests/unit/passes/TestPipeline.h"

#include "passes/Accesses.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mt;

namespace {

bool isEvent(Operation *op) { return isa<RecordOp, WaitOp>(op); }

// The i-th command of the schedule body of `module`.
Operation *commandAt(ModuleOp module, size_t i) {
  Block &body = test::scheduleOf(module).getBody().front();
  auto it = body.begin();
  std::advance(it, i);
  return &*it;
}

// Mutates a clone's event command in place; false when the mutation does
// not apply (no command to move past).
using Mutation = bool (*)(Operation *op);

bool removeCommand(Operation *op) {
  op->erase();
  return true;
}

bool moveAcrossNeighbour(Operation *op) {
  StreamId stream = streamOf(op);
  if (isa<WaitOp>(op)) {
    for (Operation *next = op->getNextNode(); next; next = next->getNextNode())
      if (streamOf(next) == stream && !isEvent(next)) {
        op->moveAfter(next);
        return true;
      }
  } else {
    for (Operation *prev = op->getPrevNode(); prev; prev = prev->getPrevNode())
      if (streamOf(prev) == stream && !isEvent(prev)) {
        op->moveBefore(prev);
        return true;
      }
  }
  return false;
}

// Mutates every event command of smallModel(3)'s schedule at M micro-
// batches and `slots` weight slots (optionally with checkpoints on the host
// and units moved in chunks); every mutant must be caught.
void mutateEveryEvent(int64_t M, int64_t slots, int64_t hostCheckpoints = 0,
                      int64_t stagingElems = int64_t(1) << 23) {
  MLIRContext ctx;
  PipelineOptions options;
  options.microBatches = M;
  options.slots = slots;
  options.hostCheckpoints = hostCheckpoints;
  options.stagingElems = stagingElems;
  std::string error;
  OwningOpRef<ModuleOp> module =
      test::compile(ctx, test::smallModel(3), options, &error);
  ASSERT_TRUE(module) << error;
  Block &body = test::scheduleOf(*module).getBody().front();
  ASSERT_EQ(test::runPass(*module, createVerifySchedule()), "");

  size_t numCommands = body.getOperations().size();
  int mutants = 0, caught = 0, notApplicable = 0;
  std::vector<std::string> missed;
  for (size_t i = 0; i < numCommands; ++i) {
    if (!isEvent(commandAt(*module, i)))
      continue;
    for (auto [name, mutate] :
         {std::pair<const char *, Mutation>{"removed", removeCommand},
          {"moved", moveAcrossNeighbour}}) {
      OwningOpRef<ModuleOp> mutant = module->clone();
      Operation *op = commandAt(*mutant, i);
      std::string text = describeCommand(op);
      if (!mutate(op)) {
        ++notApplicable;
        continue;
      }
      ++mutants;
      std::string diag = test::runPass(*mutant, createVerifySchedule());
      if (!diag.empty()) {
        ++caught;
        EXPECT_NE(diag.find("race on @"), std::string::npos) << diag;
      } else {
        missed.push_back(std::string(name) + " #" + std::to_string(i) + ": " +
                         text);
      }
    }
  }
  llvm::outs() << "M=" << M << " slots=" << slots << ": schedule of "
               << numCommands << " commands: " << mutants << " mutants, "
               << caught << " caught, " << missed.size() << " missed, "
               << notApplicable << " moves with nothing to move past\n";
  for (const std::string &m : missed)
    llvm::outs() << "  not caught: " << m << "\n";
  llvm::outs().flush();
  EXPECT_GT(mutants, 100);
  EXPECT_TRUE(missed.empty());
}

TEST(VerifyMutationTest, EveryWaitAndRecordIsNeeded) { mutateEveryEvent(2, 2); }

TEST(VerifyMutationTest, EveryWaitAndRecordIsNeededAtOneMicroBatch) {
  mutateEveryEvent(1, 2);
}

TEST(VerifyMutationTest, EveryWaitAndRecordIsNeededWithThreeSlots) {
  mutateEveryEvent(2, 3);
}

// The verifier itself: a schedule with no events at all races at once.
TEST(VerifyMutationTest, EveryWaitAndRecordIsNeededWithHostCheckpointsAndChunks) {
  // Two layers' checkpoints leave and come back; units move 1024 elements
  // at a time through the staging and landing rings.
  mutateEveryEvent(2, 2, /*hostCheckpoints=*/2, /*stagingElems=*/1024);
}

TEST(VerifyMutationTest, NoEventsRaces) {
  MLIRContext ctx;
  PipelineOptions options;
  OwningOpRef<ModuleOp> module =
      test::compile(ctx, test::smallModel(1), options);
  ASSERT_TRUE(module);
  Block &body = test::scheduleOf(*module).getBody().front();
  for (Operation &op : llvm::make_early_inc_range(body))
    if (isEvent(&op))
      op.erase();
  std::string diag = test::runPass(*module, createVerifySchedule());
  EXPECT_NE(diag.find("race on @"), std::string::npos) << diag;
  EXPECT_NE(diag.find("missing edge"), std::string::npos) << diag;
}

// The brief's literal move: past the very next command of the stream, event
// or not. A mutant it leaves uncaught must be one of the equivalent swaps
// (two waits, or two records, of one stream); the test prints how many.
TEST(VerifyMutationTest, LiteralMovesEscapeOnlyAsEquivalentSwaps) {
  MLIRContext ctx;
  PipelineOptions options;
  options.microBatches = 2;
  OwningOpRef<ModuleOp> module =
      test::compile(ctx, test::smallModel(3), options);
  ASSERT_TRUE(module);
  size_t numCommands =
      test::scheduleOf(*module).getBody().front().getOperations().size();
  int mutants = 0, caught = 0, equivalent = 0;
  for (size_t i = 0; i < numCommands; ++i) {
    if (!isEvent(commandAt(*module, i)))
      continue;
    OwningOpRef<ModuleOp> mutant = module->clone();
    Operation *op = commandAt(*mutant, i);
    bool later = isa<WaitOp>(op);
    Operation *neighbour = later ? op->getNextNode() : op->getPrevNode();
    while (neighbour && streamOf(neighbour) != streamOf(op))
      neighbour = later ? neighbour->getNextNode() : neighbour->getPrevNode();
    if (!neighbour)
      continue;
    std::string text = describeCommand(op), past = describeCommand(neighbour);
    bool sameKind = neighbour->getName() == op->getName();
    later ? op->moveAfter(neighbour) : op->moveBefore(neighbour);
    ++mutants;
    if (!test::runPass(*mutant, createVerifySchedule()).empty()) {
      ++caught;
      continue;
    }
    ++equivalent;
    EXPECT_TRUE(sameKind) << "#" << i << " " << text << " moved past " << past
                          << " escaped the verifier";
  }
  llvm::outs() << "literal moves: " << mutants << " mutants, " << caught
               << " caught, " << equivalent
               << " equivalent swaps of two waits or two records\n";
  llvm::outs().flush();
}

} // namespace
