"""The office gateway's hook (provision/products.py): the functions its role's templates call."""

from provision.products import Product

PRODUCT = Product(template_functions={
    "office_gateway_backends": "provision.office_gateway.backends:office_gateway_backends",
    "office_gateway_users": "provision.office_gateway.users:office_gateway_users",
    "office_gateway_backend_key": "provision.office_gateway.users:office_gateway_backend_key",
})
