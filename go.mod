module github.com/bellows-kv/bellows

go 1.26.0

require (
	github.com/bits-and-blooms/bloom/v3 v3.7.1
	github.com/klauspost/compress v1.20.3
	github.com/spf13/cobra v1.10.2
)

require (
	github.com/bits-and-blooms/bitset v1.24.2 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)
