package heartbeat_test

import (
	"context"
	"log"
	"log/slog"
	"os"
	"os/signal"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/clientlib/heartbeat"
	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

// A VM keeps its endpoint registered until it is told to stop.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	conn, err := grpc.NewClient("127.0.0.1:18000", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	a, err := heartbeat.New(heartbeat.Config{
		Conn:    conn,
		Service: "payments",
		Endpoint: &registryv1.Endpoint{
			Address:  "10.0.0.7",
			Ports:    []*registryv1.Port{{Name: "grpc", Number: 8080}},
			Locality: &registryv1.Locality{Region: "eu-west1", Zone: "eu-west1-b"},
		},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		log.Fatal(err)
	}
	// Run returns nil after Ctrl-C, once the endpoint is deregistered.
	if err := a.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
