# frozen_string_literal: true

require "sdb"

module Sdb
  # Rack middleware: every request is one unit of work (a span) of this thread, from the moment
  # the request reaches it to the moment the response is returned (a streamed body's iteration
  # after that is not in it). Its endpoint is known when the app is done with it:
  # - env["sdb.endpoint"], when the app set one;
  # - Rails: the controller and action that handled it, "ProductsController#index";
  # - Sinatra: its route, "GET /products/:id";
  # - else the request method alone with "(no route)": "GET (no route)". A path is never used:
  #   paths hold ids, and one endpoint per id would be no grouping at all.
  # The request id is Rails' (ActionDispatch::RequestId) or the X-Request-Id header, when either
  # is a string shorter than 64 bytes; the status is the response's (500 if the app raised).
  # The trace context (the span's trace id and span id, for trace-to-profile links) is taken when
  # the request begins: OpenTelemetry's current span when the app runs OpenTelemetry and one is
  # active here (its server span, when OpenTelemetry's Rack middleware runs before this one), else
  # the W3C `traceparent` header (its parent id: the caller's span), parsed strictly in C
  # (Spans.open); anything else gives none. Neither way allocates.
  class Middleware
    NO_ROUTE = Hash.new { |h, m| h[m] = "#{m} (no route)".freeze }
    NAMES_MAX = 10_000      # controller/action names kept: beyond, they are built per request

    def initialize(app)
      @app = app
      @names = {}           # controller class -> { action -> "Class#action" }
      @count = 0
    end

    def call(env)
      parent = Spans.current
      context = otel_context if defined?(::OpenTelemetry::Trace)
      span = if context
               Spans.open(KIND_REQUEST, nil, context.trace_id, context.span_id)
             else
               Spans.open(KIND_REQUEST, nil, env["HTTP_TRACEPARENT"])
             end
      response = nil
      begin
        response = @app.call(env)
      ensure
        close(span, parent, env, response)
      end
    end

    private

    # The current OpenTelemetry span's SpanContext when it is a valid one (its binary ids: the hex
    # ones would be Strings made per request), else nil. Never raises into the request.
    def otel_context
      return nil unless ::OpenTelemetry::Trace.respond_to?(:current_span)
      context = ::OpenTelemetry::Trace.current_span.context
      context if context.valid?
    rescue StandardError
      nil
    end

    # Never raises: what the app returns or raises reaches the server unchanged.
    def close(span, parent, env, response)
      status = response.is_a?(Array) && response[0].is_a?(Integer) ? response[0] : 500
      Spans.close(span, parent, endpoint_of(env), request_id_of(env), status)
    rescue StandardError
      Spans.close(span, parent, nil, nil, status || 0)
    end

    def endpoint_of(env)
      given = env["sdb.endpoint"]
      return given if given
      controller = env["action_controller.instance"]
      return controller_name(controller) if controller
      route = env["sinatra.route"]
      return route if route
      NO_ROUTE[env["REQUEST_METHOD"].to_s] if NO_ROUTE.size < 64 || NO_ROUTE.key?(env["REQUEST_METHOD"].to_s)
    end

    def controller_name(controller)
      action = controller.action_name
      klass = controller.class
      by_action = @names[klass]
      name = by_action && by_action[action]
      return name if name
      name = "#{klass.name}##{action}".freeze
      if @count < NAMES_MAX
        (@names[klass] ||= {})[action.dup.freeze] = name
        @count += 1
      end
      name
    end

    def request_id_of(env)
      id = env["action_dispatch.request_id"] || env["HTTP_X_REQUEST_ID"]
      id if id.is_a?(String)
    end
  end
end
