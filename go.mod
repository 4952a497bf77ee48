module github.com/recordio-bridge/bridge

go 1.26

require (
	github.com/klauspost/compress v1.20.4
	github.com/klauspost/crc32 v1.3.0
	github.com/pierrec/lz4/v4 v4.1.33
	github.com/tidwall/gjson v1.20.2
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.6
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/stretchr/testify v1.11.1 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.3.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
)
