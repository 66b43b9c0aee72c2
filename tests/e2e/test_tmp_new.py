from tests.e2e.test_dynamo_exports import DynamoExports
class New(DynamoExports):
    def test_new(self):
        self.check(["zamba2"])
del DynamoExports
