module github.com/recordio-bridge/bridge/internal/schema/mesospb

go 1.26.0

require (
	github.com/bufbuild/protocompile v0.14.1
	github.com/gogo/protobuf v1.3.2
	github.com/mesos/mesos-go v0.0.11
	go.uber.org/goleak v1.3.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/pquerna/ffjson v0.0.0-20190930134022-aa0246cd15f7 // indirect
	golang.org/x/sync v0.8.0 // indirect
)
