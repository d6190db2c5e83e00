#!/usr/bin/env python3
"""A gRPC client that knows nothing of meshd: no .proto files, no generated
code. Every descriptor it uses comes from the server's reflection, through
two reflection clients that are not meshd's: grpcio-reflection's descriptor
database, and grpc_requests, which loads every advertised service before it
makes a call (as grpcui does).

Run by daemon/tests/grpc_reflection.rs against a running `meshd run`. It
prints one JSON object per line on stdout, {"step": ..., "value": ...}, and
the Rust test judges them; any failure here is an exception and exit 1.

    python client.py --target 127.0.0.1:7420
"""

import argparse
import json
import sys

import grpc
import grpc_requests
from google.protobuf import descriptor_pool
from google.protobuf.json_format import MessageToDict
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

# Neither reflection client sets deadlines of its own: every call gets this.
CALL_TIMEOUT_SECONDS = 30.0


class Deadline(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Gives every call without a deadline CALL_TIMEOUT_SECONDS."""

    def _bounded(self, details):
        if details.timeout is not None:
            return details
        return details._replace(timeout=CALL_TIMEOUT_SECONDS)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._bounded(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._bounded(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._bounded(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._bounded(details), requests)


def connect(args):
    """How this client reaches the node, and the only place that knows: a
    plaintext channel to --target. The channel feeds grpcio-reflection; the
    keyword arguments make grpc_requests build the same connection."""
    channel = grpc.intercept_channel(grpc.insecure_channel(args.target), Deadline())
    grpc.channel_ready_future(channel).result(timeout=CALL_TIMEOUT_SECONDS)
    return channel, {"ssl": False, "interceptors": [Deadline()]}


def emit(step, value):
    print(json.dumps({"step": step, "value": value}), flush=True)


def describe_every_service(channel):
    """Lists the services, then resolves each one and every method's
    request and response types from reflected files alone (a pool that
    starts empty, fed by the server)."""
    database = ProtoReflectionDescriptorDatabase(channel)
    pool = descriptor_pool.DescriptorPool(database)
    described = {}
    for name in database.get_services():
        service = pool.FindServiceByName(name)
        described[name] = {
            method.name: [method.input_type.full_name, method.output_type.full_name]
            for method in service.methods
        }
    return described


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="host:port of meshd's gRPC listener")
    args = parser.parse_args()

    channel, client_options = connect(args)
    emit("services", describe_every_service(channel))

    # grpc_requests registers every listed service up front: one that
    # cannot be described fails here, before any call.
    client = grpc_requests.ReflectionClient(
        args.target, descriptor_pool=descriptor_pool.DescriptorPool(), **client_options
    )
    emit("status", client.request("meshd.v1.Mesh", "GetStatus", {}))
    emit(
        "health",
        {
            service: client.request("grpc.health.v1.Health", "Check", {"service": service})
            for service in ["", "meshd.v1.Mesh"]
        },
    )

    # The server subscribes before it sends the response headers, so once
    # they are here no later event can be missed; the test then changes
    # the node's config and the reload event must arrive.
    events = client.unary_stream("meshd.v1.Mesh", "WatchEvents", {}, raw_output=True)
    events.initial_metadata()
    emit("watching", True)
    # A stream opens with the node's status, then carries what changes.
    opening = next(events)
    emit("snapshot", MessageToDict(opening, preserving_proto_field_name=True))
    first = next(events)
    emit("event", MessageToDict(first, preserving_proto_field_name=True))
    events.cancel()
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
