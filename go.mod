module github.com/recordio-bridge/bridge

go 1.26

require (
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/klauspost/crc32 v1.3.0 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.34.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
