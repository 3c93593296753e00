module github.com/engram-memory-server/engram/clients/go

go 1.26.0

tool (
	connectrpc.com/connect/cmd/protoc-gen-connect-go
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	connectrpc.com/connect v1.21.1
	google.golang.org/protobuf v1.36.12
)

require google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c

require github.com/google/uuid v1.6.0
