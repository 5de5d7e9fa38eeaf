"""The office endpoint (roles/office_gateway): the backends HAProxy routes to, and its runtime API."""
