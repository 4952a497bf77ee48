module github.com/recordio-bridge/bridge

go 1.26
