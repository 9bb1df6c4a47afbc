"""A local fake of the AWS Price List API (JSON 1.1 protocol, GetProducts only): moto has none.
Answers what the real service answers for Linux shared-tenancy EC2 on-demand prices: PriceList
items as JSON strings with OnDemand terms, filtered by instanceType and regionCode."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class PricingFake(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, prices: dict[tuple[str, str], str]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.prices = prices  # (instance type, region code) -> USD per hour
        self.down = False
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: PricingFake

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.server.down:
            self._send(503, {"__type": "ServiceUnavailableException", "message": "down"})
            return
        if self.headers.get("X-Amz-Target") != "AWSPriceListService.GetProducts":
            self._send(400, {"__type": "InvalidParameterException", "message": "unknown target"})
            return
        fields = {f["Field"]: f["Value"] for f in request.get("Filters", [])}
        price = self.server.prices.get(
            (fields.get("instanceType", ""), fields.get("regionCode", ""))
        )
        items = []
        if price is not None and fields.get("operatingSystem") == "Linux":
            product = {
                "product": {
                    "attributes": {
                        "instanceType": fields["instanceType"],
                        "regionCode": fields["regionCode"],
                    }
                },
                "terms": {
                    "OnDemand": {
                        "SKU.TERM": {
                            "priceDimensions": {
                                "SKU.TERM.DIM": {
                                    "unit": "Hrs",
                                    "pricePerUnit": {"USD": price},
                                    "description": f"${price} per On Demand Linux {fields['instanceType']} Instance Hour",
                                }
                            }
                        }
                    }
                },
            }
            items.append(json.dumps(product))
        self._send(200, {"FormatVersion": "aws_v1", "PriceList": items})
