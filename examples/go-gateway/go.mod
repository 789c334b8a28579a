module eldr.dev/eldr/examples/go-gateway

go 1.25

require eldr.dev/eldr v0.0.0

replace eldr.dev/eldr => ../../bindings/go
