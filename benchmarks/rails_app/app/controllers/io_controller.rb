# Waits on IO: a pipe that nobody writes to, read with a 5 ms timeout, the way a request waits for a
# slow backend (the thread is blocked in the kernel, the GVL released).
class IoController < ActionController::API
  def show
    reader, writer = IO.pipe
    ready = IO.select([reader], nil, nil, 0.005)
    render plain: ready ? "data" : "timeout"
  ensure
    reader&.close
    writer&.close
  end

  def up
    render plain: "ok"
  end
end
