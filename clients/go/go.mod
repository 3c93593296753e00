module github.com/engram-memory-server/engram/clients/go

go 1.25.0

tool (
	connectrpc.com/connect/cmd/protoc-gen-connect-go
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	connectrpc.com/connect v1.21.0
	google.golang.org/protobuf v1.36.12
)

require github.com/google/uuid v1.6.0

require google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1
