.PHONY: test demo stubs

test:
	bash scripts/test.sh

demo:
	bash scripts/demo.sh

stubs:
	bash scripts/stubs.sh
